//! The physical plan: a pure step from a [`JobGraph`] to what runs, before anything is
//! spawned. [`PhysicalPlan::of`] says which operators are chained ([`Chains`]), which subtasks
//! run as tasks of their own, and every channel between them (which subtask sends to which,
//! on which edge, into which input). The wiring (`exec`) makes one mailbox per task that has
//! inputs and one credit channel per [`ChannelPlan`], in this order, and spawns the tasks;
//! EXPLAIN and the web UI read the same plan.
//!
//! ## Chains
//!
//! An operator is chained into its upstream node when the one edge into it is a `Forward`
//! edge on the main port, from an operator of the same parallelism whose only output it is,
//! into its logical input 0, and that input holds its watermark. Its subtask i then
//! runs in upstream subtask i: its input is called with the upstream's output as it is
//! emitted, with no channel, no credit and no copy, and watermarks, idleness, barriers and the
//! end of input reach it in the same order they would through a channel. Sinks are never
//! chained (their writes and commits wait on the outside world), and nothing is chained into a
//! source: reading and decoding keep a subtask of their own, so that they overlap with the
//! per-row work after them (a single CSV file chained with its Calc and the hash routing after
//! it took 17 % more wall time for the same CPU on two cores). A job's
//! `operator_chaining = false` (SQL: Flink's `pipeline.operator-chaining`) runs every node in
//! subtasks of its own.

use crate::graph::{JobGraph, NodeKind, Partitioning};
use crate::operator::Port;

/// One credit channel: from a subtask of the node that sends (the last node of its chain) to
/// a subtask of the node that receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelPlan {
    /// The graph edge it carries (an index into `JobGraph::edges`).
    pub edge: usize,
    /// (node, subtask) sending.
    pub from: (usize, usize),
    /// (node, subtask) receiving.
    pub to: (usize, usize),
    /// The receiver's logical input.
    pub input: usize,
}

/// The tasks and channels a graph runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhysicalPlan {
    pub chains: Chains,
    /// Every channel, grouped by sending subtask and edge, receivers in subtask order.
    pub channels: Vec<ChannelPlan>,
    /// How many tasks run: one per subtask of every node that is not chained.
    pub tasks: usize,
}

impl PhysicalPlan {
    /// The plan of `graph`: its chains, then a channel for every pair of subtasks an edge joins
    /// (`Forward`: subtask i to i; any other partitioning: to every subtask downstream).
    /// Edges into a chained operator carry no channel: it runs in the sender's subtask.
    pub fn of(graph: &JobGraph) -> PhysicalPlan {
        let chains = Chains::of(graph);
        let mut channels = Vec::new();
        for (k, e) in graph.edges.iter().enumerate() {
            if chains.is_chained(e.to) {
                continue;
            }
            let down = graph.nodes[e.to].parallelism;
            for i in 0..graph.nodes[e.from].parallelism {
                let targets = match e.partitioning {
                    Partitioning::Forward => i..i + 1,
                    _ => 0..down,
                };
                channels.extend(targets.map(|j| ChannelPlan {
                    edge: k,
                    from: (e.from, i),
                    to: (e.to, j),
                    input: e.input,
                }));
            }
        }
        let tasks = (graph.nodes.iter())
            .filter(|n| !chains.is_chained(n.id))
            .map(|n| n.parallelism)
            .sum();
        PhysicalPlan {
            chains,
            channels,
            tasks,
        }
    }

    /// The bound on rows in flight on all channels: channels × buffers × batch rows.
    pub fn in_flight_bound_rows(&self, graph: &JobGraph) -> i64 {
        (self.channels.len() * graph.config.channel_buffers * graph.config.batch_rows) as i64
    }
}

/// For each node of a graph, the chain it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chains {
    /// The node each node's subtasks run in (itself when it heads a chain or is alone).
    head: Vec<usize>,
    /// The node chained after each node, if any.
    next: Vec<Option<usize>>,
}

impl Chains {
    /// The chains of `graph` under its `operator_chaining` setting.
    pub fn of(graph: &JobGraph) -> Chains {
        let n = graph.nodes.len();
        let mut next = vec![None; n];
        if graph.config.operator_chaining {
            let inputs = graph.inputs_by_node();
            let mut outputs = vec![0usize; n];
            for e in &graph.edges {
                outputs[e.from] += 1;
            }
            for node in &graph.nodes {
                let NodeKind::Operator { factory } = &node.kind else {
                    continue;
                };
                let [e] = inputs[node.id].as_slice() else {
                    continue;
                };
                let up = &graph.nodes[e.from];
                let chainable = e.partitioning == Partitioning::Forward
                    && e.port == Port::Main
                    && e.input == 0
                    && factory.holds_watermark(0)
                    && up.parallelism == node.parallelism
                    && outputs[e.from] == 1
                    && matches!(up.kind, NodeKind::Operator { .. });
                if chainable {
                    next[e.from] = Some(node.id);
                }
            }
        }
        let mut prev = vec![None; n];
        for (i, j) in next.iter().enumerate() {
            if let Some(j) = j {
                prev[*j] = Some(i);
            }
        }
        let head = (0..n)
            .map(|mut i| {
                while let Some(p) = prev[i] {
                    i = p;
                }
                i
            })
            .collect();
        Chains { head, next }
    }

    /// Whether `node` runs inside the subtasks of the node before it.
    pub fn is_chained(&self, node: usize) -> bool {
        self.head[node] != node
    }

    /// The node whose subtasks `node` runs in (itself when it is not chained).
    pub fn head(&self, node: usize) -> usize {
        self.head[node]
    }

    /// The nodes chained after `head`, in order.
    pub fn followers(&self, head: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let mut at = head;
        while let Some(n) = self.next[at] {
            out.push(n);
            at = n;
        }
        out
    }

    /// The node whose output edges leave the chain `head` starts.
    pub fn tail(&self, head: usize) -> usize {
        self.followers(head).last().copied().unwrap_or(head)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_schema::{DataType, Field, Schema};
    use weir_core::expr::{col, lit};

    use super::*;
    use crate::testing::VecSource;
    use crate::{CollectSink, JobBuilder, JobConfig, SourceOptions};

    #[test]
    fn a_forward_edge_is_a_channel_per_subtask_a_keyed_one_every_pair_and_a_chain_none() {
        let job = JobBuilder::with_config(
            "plan",
            JobConfig {
                parallelism: 2,
                ..Default::default()
            },
        );
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("ts", DataType::Int64, false),
        ]));
        let source = VecSource::new(schema, vec![vec![], vec![]]).unwrap();
        job.source("in", source, SourceOptions::event_time("ts", 0))
            .filter(col("k").gt(lit(0)))
            .key_by(&["k"])
            .apply(
                "keyed",
                Arc::new(crate::ops::Filter {
                    predicate: col("k").gt(lit(1)),
                }),
            )
            .filter(col("k").gt(lit(2)))
            .sink("out", CollectSink::new());
        let graph = job.build().unwrap();
        let plan = PhysicalPlan::of(&graph);
        let names: Vec<&str> = graph.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names.len(), 5, "{names:?}");
        // The last filter runs in the subtasks of the keyed one before it.
        assert!(plan.chains.is_chained(3), "{names:?}");
        let between = |a: usize, b: usize| -> Vec<((usize, usize), (usize, usize))> {
            (plan.channels.iter())
                .filter(|c| c.from.0 == a && c.to.0 == b)
                .map(|c| (c.from, c.to))
                .collect()
        };
        // Source to filter: forward, subtask to subtask.
        assert_eq!(between(0, 1), [((0, 0), (1, 0)), ((0, 1), (1, 1))]);
        // Filter to the keyed filter: every pair.
        assert_eq!(between(1, 2).len(), 4);
        // Into the chained filter: none; from it (the chain's tail) to the sink: forward.
        assert!(between(2, 3).is_empty());
        assert_eq!(between(3, 4), [((3, 0), (4, 0)), ((3, 1), (4, 1))]);
        assert_eq!(plan.channels.len(), 8);
        assert_eq!(
            plan.tasks,
            2 * 4,
            "five nodes, one chained, two subtasks each"
        );
        assert_eq!(
            plan.in_flight_bound_rows(&graph),
            (8 * graph.config.channel_buffers * graph.config.batch_rows) as i64
        );
    }
}
