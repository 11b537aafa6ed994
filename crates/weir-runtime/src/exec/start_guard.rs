//! The misaligned-start guard: refuses a time-bounded join whose inputs begin days apart.

use std::collections::HashMap;
use std::sync::Arc;

use weir_core::time::Clock;

use crate::error::{Error, Result};
use crate::graph::{JobGraph, NodeKind, SourceWatermarks};
use crate::source::{ReaderContext, SourceFactory, SourcePoll};

/// A peek at where a source begins polls its reader at most this often, and waits at most
/// this long in all for splits that have no row yet (an empty topic): then its start is
/// unknown and the guard leaves the join alone.
const PEEK_POLLS: usize = 10_000;
const PEEK_WAIT_MS: u64 = 2_000;

/// Where a source begins in event time: what it can tell without reading (a Kafka timestamp
/// start), else, on a fresh start, the least event time of the first rows of each of its
/// splits (a bounded peek); never before the start of its event-time range (a backfill's).
fn start_of(
    name: &str,
    factory: &Arc<dyn SourceFactory>,
    watermarks: &SourceWatermarks,
    peek: bool,
    clock: &Arc<dyn Clock>,
) -> Result<Option<i64>> {
    let Some(col) = &watermarks.event_time else {
        return Ok(None);
    };
    let mut t = factory.start_event_time(col)?;
    if t.is_none() && peek {
        t = peek_start(name, factory, col, clock)?;
    }
    Ok(match (t, watermarks.range.from_ms) {
        (Some(t), Some(from)) => Some(t.max(from)),
        (None, Some(from)) => Some(from),
        (t, None) => t,
    })
}

/// The least event time of the first rows of each split of `factory`, read by a reader of its
/// own that is dropped after (it commits nothing); `None` when a split has no row within the
/// peek's bounds.
fn peek_start(
    name: &str,
    factory: &Arc<dyn SourceFactory>,
    col: &str,
    clock: &Arc<dyn Clock>,
) -> Result<Option<i64>> {
    let splits = factory.splits()?;
    let n = splits.len();
    if n == 0 {
        return Ok(None);
    }
    let et = weir_core::batch::event_time_index(&factory.schema(), col)?;
    let ctx = ReaderContext::standalone(name, &splits, 1024, clock.clone());
    let mut reader = factory.create_reader((0..n).collect(), ctx)?;
    let mut first: Vec<Option<i64>> = vec![None; n];
    let mut done = vec![false; n];
    let mut waited_ms = 0;
    for _ in 0..PEEK_POLLS {
        match reader.poll()? {
            SourcePoll::Batch { split, batch } if split < n && !done[split] => {
                let col = batch.column(et);
                let times = weir_core::batch::event_times(&batch, et)?;
                let least = (0..batch.num_rows())
                    .filter(|&i| !col.is_null(i))
                    .map(|i| times[i])
                    .min();
                if least.is_some() {
                    first[split] = least;
                    done[split] = true;
                    // Enough of this split: read the others (a scan reads its splits in turn).
                    reader.set_paused(split, true);
                }
            }
            SourcePoll::SplitFinished(split) if split < n => done[split] = true,
            SourcePoll::Finished => break,
            SourcePoll::Pending { wait_ms } => {
                if waited_ms >= PEEK_WAIT_MS {
                    break;
                }
                let ms = wait_ms.clamp(1, 20);
                waited_ms += ms;
                std::thread::sleep(std::time::Duration::from_millis(ms));
            }
            _ => {}
        }
        if done.iter().all(|d| *d) {
            break;
        }
    }
    if !done.iter().all(|d| *d) {
        tracing::debug!(
            source = name,
            "no first rows within the peek: its start is unknown"
        );
        return Ok(None);
    }
    Ok(first.into_iter().flatten().min())
}

/// The misaligned-start guard: refuses to start a time-bounded join whose inputs would begin
/// further apart in event time than its bound plus the alignment drift (at least an hour).
/// Where a source begins is what it can tell (a Kafka start at a timestamp) or, on a `fresh`
/// start, what a bounded peek at its splits' first rows finds (files, earliest or committed
/// offsets); a restore goes on from its checkpoint and is not peeked at.
/// The earlier side's rows would wait in state for the later side to catch up: the replay
/// incident (one consumer reset days back, state grows until the job dies).
pub(super) fn check_aligned_start(
    graph: &JobGraph,
    fresh: bool,
    clock: &Arc<dyn Clock>,
) -> Result<()> {
    let mut known_starts: HashMap<usize, Option<i64>> = HashMap::new();
    // Sources feeding `node`, following edges back.
    pub(super) fn sources(graph: &JobGraph, node: usize, out: &mut Vec<usize>) {
        if matches!(graph.nodes[node].kind, NodeKind::Source { .. }) {
            out.push(node);
            return;
        }
        for e in graph.inputs_of(node) {
            sources(graph, e.from, out);
        }
    }
    for n in &graph.nodes {
        let NodeKind::Operator { factory } = &n.kind else {
            continue;
        };
        let Some(bound) = factory.time_bound_ms() else {
            continue;
        };
        let mut starts: Vec<(usize, String, i64)> = Vec::new();
        let mut drift = 0i64;
        let mut known = true;
        for e in graph.inputs_of(n.id) {
            let mut srcs = Vec::new();
            sources(graph, e.from, &mut srcs);
            let mut input_start: Option<(String, i64)> = None;
            for s in srcs {
                let NodeKind::Source {
                    factory,
                    watermarks,
                } = &graph.nodes[s].kind
                else {
                    continue;
                };
                drift = drift.max(watermarks.alignment.as_ref().map_or(0, |a| a.max_drift_ms));
                let t = match known_starts.get(&s) {
                    Some(t) => *t,
                    None => {
                        let t = start_of(&graph.nodes[s].name, factory, watermarks, fresh, clock)?;
                        known_starts.insert(s, t);
                        t
                    }
                };
                match t {
                    Some(t) if input_start.as_ref().is_none_or(|x| t < x.1) => {
                        input_start = Some((graph.nodes[s].name.clone(), t))
                    }
                    Some(_) => {}
                    None => known = false,
                }
            }
            match input_start {
                Some((name, t)) => starts.push((e.input, name, t)),
                None => known = false,
            }
        }
        if !known || starts.len() < 2 {
            continue;
        }
        let lo = starts.iter().map(|s| s.2).min().expect("two inputs");
        let hi = starts.iter().map(|s| s.2).max().expect("two inputs");
        let threshold = (bound.saturating_add(drift)).max(3_600_000);
        if hi - lo > threshold {
            let sides: Vec<String> = starts
                .iter()
                .map(|(i, name, t)| {
                    format!(
                        "input {i} `{name}` starts at {}",
                        weir_core::time::format_utc(*t)
                    )
                })
                .collect();
            return Err(Error::plan(format!(
                "refusing to start: the inputs of `{}` (created at {}) begin {:.1} h apart in event \
                 time ({}), more than the join's bound plus the alignment drift ({:.1} h). The \
                 earlier side's rows would wait in state until the later side catches up. Replay \
                 both sides from the same event-time point, or start anyway with \
                 --allow-misaligned-start",
                n.name,
                n.created_at,
                (hi - lo) as f64 / 3_600_000.0,
                sides.join(", "),
                threshold as f64 / 3_600_000.0
            )));
        }
    }
    Ok(())
}
