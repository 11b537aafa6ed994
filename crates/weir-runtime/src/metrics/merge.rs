//! The snapshots of jobs that each run a part of one job, as one snapshot of that job: a
//! group's tasks (`weir run --group`), each a stage of the job at parallelism 1, seen by the
//! member that runs them as the job's operators with one subtask per task.

use std::collections::BTreeMap;

use super::{
    gauge_is_max, CheckpointSnapshot, MetricsSnapshot, NodeCheckpointSnapshot, NodeSnapshot,
};

/// A job that runs some of another job's nodes at parallelism 1 (see
/// [`MetricsSnapshot::merged`]): a group's task.
#[derive(Debug, Clone)]
pub struct Part {
    /// Its subtask of each node it runs: a group's task's partition.
    pub subtask: usize,
    pub snapshot: MetricsSnapshot,
    /// For each of its nodes, in its graph's order, the other job's node it is (`None`: one
    /// that job has not, a repartition topic's).
    pub nodes: Vec<Option<usize>>,
}

impl MetricsSnapshot {
    /// One snapshot of a job whose nodes are `nodes` (name and kind, in its graph's order), from
    /// the snapshots of `parts`.
    ///
    /// Each node's subtasks and splits are those of every part that runs it, its counters,
    /// state and in-flight rows summed, its gauges summed (the greatest for a maximum or a
    /// quantile), its inputs' event times the greatest and their watermarks the least, its
    /// alerts raised if any part's is. A node no part runs shows no subtask; the parts' nodes
    /// the job has not (a group's repartition topics) are left out. The checkpoints are the
    /// parts' together: how many completed in all, the newest's number, the slowest.
    pub fn merged(parts: &[Part], nodes: &[(String, String)], at: i64) -> Self {
        let mut merged: Vec<NodeSnapshot> = (nodes.iter())
            .map(|(name, kind)| empty_node(name, kind))
            .collect();
        let mut seen = vec![false; nodes.len()];
        for part in parts {
            let job_node = |k: usize| part.nodes.get(k).copied().flatten();
            for (k, n) in part.snapshot.nodes.iter().enumerate() {
                let Some(i) = job_node(k).filter(|&i| i < merged.len()) else {
                    continue;
                };
                // The node it is chained into, as the job's: the part's indices are its own.
                let chained_into = n.chained_into.and_then(job_node);
                add_node(&mut merged[i], n, part.subtask, chained_into, !seen[i]);
                seen[i] = true;
            }
        }
        for n in &mut merged {
            // Each part reads its own splits: their spread is over all of them.
            let open: Vec<i64> = (n.splits.iter())
                .filter(|s| !s.idle && !s.finished)
                .filter_map(|s| s.watermark)
                .collect();
            if let (Some(lo), Some(hi)) = (open.iter().min(), open.iter().max()) {
                let spread = (open.len() > 1).then_some(hi - lo);
                n.split_spread_ms = n.split_spread_ms.max(spread);
                n.peak_split_spread_ms = n.peak_split_spread_ms.max(spread);
            }
            n.subtasks.sort_by_key(|s| s.subtask);
            let rows: Vec<u64> = n.subtasks.iter().map(|s| s.rows_in).collect();
            let avg = rows.iter().sum::<u64>() as f64 / rows.len().max(1) as f64;
            n.load_max_over_avg = if avg > 0.0 {
                rows.iter().copied().max().unwrap_or(0) as f64 / avg
            } else {
                1.0
            };
        }
        let snaps = || parts.iter().map(|p| &p.snapshot);
        let known = |name: &String| nodes.iter().any(|(n, _)| n == name);
        MetricsSnapshot {
            at,
            interval_secs: snaps().map(|s| s.interval_secs).fold(0.0, f64::max),
            nodes: merged,
            in_flight_rows: snaps().map(|s| s.in_flight_rows).sum(),
            peak_in_flight_rows: snaps().map(|s| s.peak_in_flight_rows).sum(),
            in_flight_bound_rows: snaps().map(|s| s.in_flight_bound_rows).sum(),
            bottleneck: snaps().filter_map(|s| s.bottleneck.clone()).find(known),
            hot_keys: (snaps().flat_map(|s| &s.hot_keys))
                .filter(|h| known(&h.from) && known(&h.to))
                .cloned()
                .collect(),
            checkpoints: checkpoints(snaps()),
            slo: None,
        }
    }
}

fn empty_node(name: &str, kind: &str) -> NodeSnapshot {
    NodeSnapshot {
        name: name.to_string(),
        kind: kind.to_string(),
        rows_in: 0,
        rows_out: 0,
        late_rows: 0,
        state_rows: 0,
        state_bytes: 0,
        peak_state_rows: 0,
        peak_state_bytes: 0,
        gauges: BTreeMap::new(),
        load_max_over_avg: 1.0,
        inputs: Vec::new(),
        event_time_spread_ms: None,
        split_spread_ms: None,
        split_spread_alert: false,
        split_spread_alerts: 0,
        peak_split_spread_ms: None,
        spread_alert: false,
        spread_alerts: 0,
        peak_event_time_spread_ms: None,
        subtasks: Vec::new(),
        splits: Vec::new(),
        chained_into: None,
        checkpoint: None,
        state_on_disk: false,
    }
}

/// Adds part `part`'s `n` to the merged node `to` (`first`: the first part seen to run it).
fn add_node(
    to: &mut NodeSnapshot,
    n: &NodeSnapshot,
    part: usize,
    chained_into: Option<usize>,
    first: bool,
) {
    to.rows_in += n.rows_in;
    to.rows_out += n.rows_out;
    to.late_rows += n.late_rows;
    to.state_rows += n.state_rows;
    to.state_bytes += n.state_bytes;
    to.peak_state_rows += n.peak_state_rows;
    to.peak_state_bytes += n.peak_state_bytes;
    for (g, v) in &n.gauges {
        let e = to.gauges.entry(g.clone()).or_insert(0);
        *e = if gauge_is_max(g) {
            (*e).max(*v)
        } else {
            *e + *v
        };
    }
    for input in &n.inputs {
        match to.inputs.iter_mut().find(|i| i.input == input.input) {
            Some(i) => {
                i.max_event_time = i.max_event_time.max(input.max_event_time);
                i.watermark = least(i.watermark, input.watermark);
                i.watermark_delay_ms = i.watermark_delay_ms.max(input.watermark_delay_ms);
            }
            None => to.inputs.push(input.clone()),
        }
    }
    to.event_time_spread_ms = to.event_time_spread_ms.max(n.event_time_spread_ms);
    to.split_spread_ms = to.split_spread_ms.max(n.split_spread_ms);
    to.split_spread_alert |= n.split_spread_alert;
    to.split_spread_alerts += n.split_spread_alerts;
    to.peak_split_spread_ms = to.peak_split_spread_ms.max(n.peak_split_spread_ms);
    to.spread_alert |= n.spread_alert;
    to.spread_alerts += n.spread_alerts;
    to.peak_event_time_spread_ms = to
        .peak_event_time_spread_ms
        .max(n.peak_event_time_spread_ms);
    to.subtasks.extend(n.subtasks.iter().map(|s| {
        let mut s = s.clone();
        s.subtask = part;
        s
    }));
    to.splits.extend(n.splits.iter().cloned());
    if first {
        to.chained_into = chained_into;
    }
    if let Some(c) = &n.checkpoint {
        to.checkpoint = Some(match to.checkpoint {
            None => *c,
            Some(t) => NodeCheckpointSnapshot {
                completed: t.completed + c.completed,
                last_id: t.last_id.max(c.last_id),
                last_sync_ms: t.last_sync_ms.max(c.last_sync_ms),
                last_async_ms: t.last_async_ms.max(c.last_async_ms),
                last_alignment_ms: t.last_alignment_ms.max(c.last_alignment_ms),
                last_bytes: t.last_bytes + c.last_bytes,
                last_written_bytes: t.last_written_bytes + c.last_written_bytes,
                max_sync_ms: t.max_sync_ms.max(c.max_sync_ms),
                max_async_ms: t.max_async_ms.max(c.max_async_ms),
                max_alignment_ms: t.max_alignment_ms.max(c.max_alignment_ms),
                written_bytes_total: t.written_bytes_total + c.written_bytes_total,
            },
        });
    }
    to.state_on_disk |= n.state_on_disk;
}

/// The lesser of two watermarks, one not known yet holding the other back.
fn least(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        _ => None,
    }
}

fn checkpoints<'a>(snaps: impl Iterator<Item = &'a MetricsSnapshot>) -> CheckpointSnapshot {
    let mut c = CheckpointSnapshot::default();
    let mut watermark: Option<Option<i64>> = None;
    for s in snaps {
        let p = &s.checkpoints;
        c.completed += p.completed;
        // Each part numbers its own checkpoints: the greatest number, the slowest last one.
        c.last_id = c.last_id.max(p.last_id);
        c.last_duration_ms = c.last_duration_ms.max(p.last_duration_ms);
        c.max_duration_ms = c.max_duration_ms.max(p.max_duration_ms);
        c.last_bytes += p.last_bytes;
        c.last_written_bytes += p.last_written_bytes;
        c.written_bytes_total += p.written_bytes_total;
        c.last_sync_ms = c.last_sync_ms.max(p.last_sync_ms);
        c.last_async_ms = c.last_async_ms.max(p.last_async_ms);
        c.max_sync_ms = c.max_sync_ms.max(p.max_sync_ms);
        c.last_alignment_ms = c.last_alignment_ms.max(p.last_alignment_ms);
        c.max_alignment_ms = c.max_alignment_ms.max(p.max_alignment_ms);
        watermark = Some(match watermark {
            None => p.last_watermark,
            Some(w) => least(w, p.last_watermark),
        });
    }
    c.last_watermark = watermark.flatten();
    c
}

#[cfg(test)]
mod tests {
    use super::super::{InputSnapshot, SplitSnapshot, SubtaskSnapshot};
    use super::*;

    fn subtask(rows_in: u64, watermark: i64) -> SubtaskSnapshot {
        SubtaskSnapshot {
            subtask: 0,
            rows_in,
            rows_out: rows_in / 2,
            busy_ms_per_sec: 100.0,
            backpressured_ms_per_sec: 0.0,
            idle_ms_per_sec: 900.0,
            busy_ms_total: 1,
            backpressured_ms_total: 0,
            idle_ms_total: 9,
            watermark: Some(watermark),
            late_rows: 1,
            state_rows: rows_in,
            state_bytes: 8 * rows_in,
            finished: false,
        }
    }

    fn node(name: &str, rows_in: u64, watermark: i64, chained_into: Option<usize>) -> NodeSnapshot {
        let mut n = empty_node(name, "operator");
        n.rows_in = rows_in;
        n.rows_out = rows_in / 2;
        n.late_rows = 1;
        n.state_rows = rows_in;
        n.subtasks = vec![subtask(rows_in, watermark)];
        n.gauges = [
            ("open_windows".to_string(), 3),
            ("batch_max".to_string(), rows_in as i64),
        ]
        .into();
        n.inputs = vec![InputSnapshot {
            input: 0,
            max_event_time: Some(watermark + 100),
            watermark: Some(watermark),
            watermark_delay_ms: Some(5),
        }];
        n.chained_into = chained_into;
        n
    }

    fn snapshot(nodes: Vec<NodeSnapshot>, completed: u64, last_id: u64) -> MetricsSnapshot {
        MetricsSnapshot {
            at: 1,
            interval_secs: 1.0,
            nodes,
            in_flight_rows: 10,
            peak_in_flight_rows: 20,
            in_flight_bound_rows: 100,
            bottleneck: None,
            hot_keys: Vec::new(),
            checkpoints: CheckpointSnapshot {
                completed,
                last_id,
                ..Default::default()
            },
            slo: None,
        }
    }

    #[test]
    fn tasks_of_two_stages_make_the_job_s_nodes_with_a_subtask_per_task() {
        let job: Vec<(String, String)> = [
            ("source", "source"),
            ("calc", "operator"),
            ("count", "operator"),
            ("calc", "operator"),
        ]
        .iter()
        .map(|(n, k)| (n.to_string(), k.to_string()))
        .collect();
        let mut source = node("source", 0, 0, None);
        source.splits = vec![SplitSnapshot {
            split: "clicks-0".into(),
            rows_read: 40,
            max_event_time: Some(10),
            watermark: Some(5),
            idle: false,
            finished: false,
            time_lag_ms: None,
            watermark_delay_ms: None,
            late_rows: 0,
            dead_letters: 0,
            progress_done: 0,
            progress_total: 0,
            lag_records: Some(3),
            paused: false,
            group_min_watermark: None,
            drift_ms: None,
            outside_range: 0,
        }];
        // Stage 0's tasks: the source, the calc chained into it (index 0 in the task's job),
        // and the repartition sink, which the job has not.
        let stage0 = |p: usize, rows: u64| {
            let mut s = source.clone();
            s.splits[0].split = format!("clicks-{p}");
            s.splits[0].watermark = Some(5 + 20 * p as i64);
            Part {
                subtask: p,
                snapshot: snapshot(
                    vec![
                        s,
                        node("calc", rows, 1_000, Some(0)),
                        node("repartition", rows, 0, None),
                    ],
                    4,
                    7 + p as u64,
                ),
                nodes: vec![Some(0), Some(1), None],
            }
        };
        // Stage 1's tasks: the repartition source, the count, and a calc named as stage 0's
        // chained into the count (index 1 in the task's job, 2 in the job's).
        let stage1 = |p: usize, rows: u64, wm: i64| Part {
            subtask: p,
            snapshot: snapshot(
                vec![
                    node("repartition", 0, 0, None),
                    node("count", rows, wm, None),
                    node("calc", 7, wm, Some(1)),
                ],
                2,
                3,
            ),
            nodes: vec![None, Some(2), Some(3)],
        };
        let parts = vec![
            stage0(0, 100),
            stage0(1, 300),
            stage1(1, 50, 2_000),
            stage1(0, 150, 1_500),
        ];
        let m = MetricsSnapshot::merged(&parts, &job, 99);
        assert_eq!(m.at, 99);
        let names: Vec<&str> = m.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["source", "calc", "count", "calc"]);
        let calc = &m.nodes[1];
        assert_eq!((calc.rows_in, calc.rows_out, calc.late_rows), (400, 200, 2));
        assert_eq!(
            calc.chained_into,
            Some(0),
            "the job's index, not the task's"
        );
        assert_eq!(calc.gauges["open_windows"], 6, "summed");
        assert_eq!(calc.gauges["batch_max"], 300, "the greatest");
        assert_eq!((calc.load_max_over_avg * 10.0).round(), 15.0);
        let count = &m.nodes[2];
        let subtasks: Vec<(usize, u64)> = count
            .subtasks
            .iter()
            .map(|s| (s.subtask, s.rows_in))
            .collect();
        assert_eq!(
            subtasks,
            [(0, 150), (1, 50)],
            "one subtask per task, by partition"
        );
        assert_eq!(count.inputs[0].watermark, Some(1_500), "the least");
        assert_eq!(count.inputs[0].max_event_time, Some(2_100), "the greatest");
        assert_eq!(count.chained_into, None);
        let second = &m.nodes[3];
        assert_eq!(
            (second.rows_in, second.chained_into),
            (14, Some(2)),
            "by position, not by name"
        );
        let splits: Vec<&str> = m.nodes[0].splits.iter().map(|s| s.split.as_str()).collect();
        assert_eq!(splits, ["clicks-0", "clicks-1"]);
        assert_eq!(
            m.nodes[0].split_spread_ms,
            Some(20),
            "over every task's splits"
        );
        assert_eq!(m.in_flight_rows, 40);
        assert_eq!((m.checkpoints.completed, m.checkpoints.last_id), (12, 8));
        // A node no running task has shows no subtask.
        let m = MetricsSnapshot::merged(&parts[..2], &job, 99);
        assert!(m.nodes[2].subtasks.is_empty());
        assert!(m.nodes[3].subtasks.is_empty());
        assert_eq!(m.nodes[2].rows_in, 0);
    }
}
