//! The misaligned-start guard: refuses a time-bounded join whose inputs begin days apart.

use crate::error::{Error, Result};
use crate::graph::{JobGraph, NodeKind};

/// The misaligned-start guard: refuses to start a time-bounded join whose inputs would begin
/// further apart in event time than its bound plus the alignment drift (at least an hour).
/// The earlier side's rows would wait in state for the later side to catch up: the replay
/// incident (one consumer reset days back, state grows until the job dies).
pub(super) fn check_aligned_start(graph: &JobGraph) -> Result<()> {
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
                let t = match &watermarks.event_time {
                    Some(col) => factory.start_event_time(col)?,
                    None => None,
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
