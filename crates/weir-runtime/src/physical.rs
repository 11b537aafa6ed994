//! The physical plan's chains: which operators run inside the subtask of the node before them.
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
