//! The Rust builder API: a job is built by chaining methods on [`Stream`]s.
//!
//! ```
//! use std::sync::Arc;
//! use weir_core::expr::{col, lit};
//! use weir_runtime::{JobBuilder, CollectSink, SourceOptions};
//! # use weir_runtime::testing::VecSource;
//! # let source = VecSource::numbers(100);
//!
//! let job = JobBuilder::new("example");
//! let sink = CollectSink::new();
//! job.source("numbers", source, SourceOptions::event_time("ts", 0))
//!     .filter(col("n").gt(lit(10)))
//!     .sink("out", sink.clone());
//! let graph = job.build().unwrap();
//! print!("{graph}");
//! ```
//!
//! Building never fails half-way: the first error (with the `file:line` of the call that made
//! it) is kept and returned by [`JobBuilder::build`].

use std::cell::RefCell;
use std::panic::Location;
use std::rc::Rc;
use std::sync::Arc;

use arrow_schema::SchemaRef;
use weir_core::expr::Expr;
use weir_core::watermark::WatermarkStrategy;

use crate::error::{Error, Result};
use crate::graph::{
    Edge, JobConfig, JobGraph, Node, NodeKind, OperatorFactory, Partitioning, SourceWatermarks,
    StreamInfo,
};
use crate::operator::Port;
use crate::ops;
use crate::sink::SinkFactory;
use crate::source::SourceFactory;

struct BuildState {
    graph: JobGraph,
    error: Option<Error>,
}

/// Builds a [`JobGraph`].
#[derive(Clone)]
pub struct JobBuilder {
    state: Rc<RefCell<BuildState>>,
}

/// How a source makes event time and watermarks.
#[derive(Debug, Clone, Default)]
pub struct SourceOptions {
    pub watermarks: SourceWatermarks,
    pub parallelism: Option<usize>,
}

impl SourceOptions {
    /// No event time: the stream has no watermarks (until the end of input).
    pub fn none() -> Self {
        Self::default()
    }

    /// Event time from `column`, with watermarks trailing the newest row by `max_delay_ms`.
    pub fn event_time(column: &str, max_delay_ms: i64) -> Self {
        SourceOptions {
            watermarks: SourceWatermarks {
                event_time: Some(column.to_string()),
                strategy: WatermarkStrategy::bounded(max_delay_ms),
                idle_timeout_ms: None,
                alignment: None,
                range: Default::default(),
                batch: None,
            },
            parallelism: None,
        }
    }

    pub fn strategy(mut self, strategy: WatermarkStrategy) -> Self {
        self.watermarks.strategy = strategy;
        self
    }

    /// A split with no rows for `ms` of processing time stops holding the watermark back; 0
    /// turns idleness off, as in Flink. Time the source spends blocked (by backpressure, by
    /// barriers) does not count, and a split with rows ready is never idle
    /// ([`SourceReader::has_ready_rows`](crate::SourceReader::has_ready_rows)).
    pub fn idle_timeout_ms(mut self, ms: i64) -> Self {
        self.watermarks.idle_timeout_ms = (ms > 0).then_some(ms);
        self
    }

    pub fn parallelism(mut self, p: usize) -> Self {
        self.parallelism = Some(p);
        self
    }

    /// Aligns this source's splits with the other sources of `alignment.group`.
    pub fn aligned(mut self, alignment: crate::graph::WatermarkAlignment) -> Self {
        self.watermarks.alignment = Some(alignment);
        self
    }
}

fn here(loc: &Location) -> String {
    format!("{}:{}", loc.file(), loc.line())
}

impl JobBuilder {
    pub fn new(name: impl Into<String>) -> Self {
        Self::with_config(name, JobConfig::default())
    }

    /// The job's name.
    pub fn name(&self) -> String {
        self.state.borrow().graph.name.clone()
    }

    pub fn with_config(name: impl Into<String>, config: JobConfig) -> Self {
        JobBuilder {
            state: Rc::new(RefCell::new(BuildState {
                graph: JobGraph {
                    name: name.into(),
                    config,
                    nodes: Vec::new(),
                    edges: Vec::new(),
                },
                error: None,
            })),
        }
    }

    /// Changes the job's settings (parallelism applies to nodes created afterwards).
    /// The parallelism of nodes that set none.
    pub fn default_parallelism(&self) -> usize {
        self.state.borrow().graph.config.parallelism
    }

    pub fn configure(&self, f: impl FnOnce(&mut JobConfig)) {
        f(&mut self.state.borrow_mut().graph.config);
    }

    /// Adds a source.
    #[track_caller]
    pub fn source(
        &self,
        name: impl Into<String>,
        factory: impl SourceFactory + 'static,
        options: SourceOptions,
    ) -> Stream {
        self.source_arc(name, Arc::new(factory), options)
    }

    #[track_caller]
    pub fn source_arc(
        &self,
        name: impl Into<String>,
        factory: Arc<dyn SourceFactory>,
        options: SourceOptions,
    ) -> Stream {
        let at = here(Location::caller());
        let name = name.into();
        let schema = factory.schema();
        if let Some(et) = &options.watermarks.event_time {
            if let Err(e) = weir_core::batch::event_time_index(&schema, et) {
                self.fail(Error::plan(format!(
                    "source `{name}` (created at {at}): {e}"
                )));
            }
        }
        let mut st = self.state.borrow_mut();
        let parallelism = options.parallelism.unwrap_or(st.graph.config.parallelism);
        let id = st.graph.nodes.len();
        st.graph.nodes.push(Node {
            id,
            name,
            uid: None,
            parallelism,
            created_at: at,
            output: StreamInfo {
                schema,
                event_time: options.watermarks.event_time.clone(),
            },
            kind: NodeKind::Source {
                factory,
                watermarks: options.watermarks,
            },
        });
        Stream {
            job: self.clone(),
            node: id,
            port: Port::Main,
        }
    }

    fn fail(&self, e: Error) {
        let mut st = self.state.borrow_mut();
        if st.error.is_none() {
            st.error = Some(e);
        }
    }

    /// Adds a node fed by `inputs` (stream, partitioning). Returns its id.
    fn add(
        &self,
        name: String,
        kind: NodeKind,
        inputs: Vec<(&Stream, Partitioning)>,
        at: String,
        parallelism: Option<usize>,
    ) -> usize {
        let infos: Vec<StreamInfo> = {
            let st = self.state.borrow();
            inputs
                .iter()
                .map(|(s, _)| st.graph.nodes[s.node].output.clone())
                .collect()
        };
        let output = match &kind {
            NodeKind::Operator { factory } => match factory.plan(&infos) {
                Ok(o) => o,
                Err(e) => {
                    self.fail(Error::plan(format!("`{name}` (created at {at}): {e}")));
                    infos.first().cloned().unwrap_or(StreamInfo {
                        schema: Arc::new(arrow_schema::Schema::empty()),
                        event_time: None,
                    })
                }
            },
            _ => infos[0].clone(),
        };
        for (s, p) in &inputs {
            if let Partitioning::Hash { keys, .. } | Partitioning::Salted { keys, .. } = p {
                if let Err(e) = weir_core::keys::KeyEncoder::new(&s.schema(), keys) {
                    self.fail(Error::plan(format!(
                        "key_by for `{name}` (created at {at}): {e}"
                    )));
                }
            }
        }
        let mut st = self.state.borrow_mut();
        let id = st.graph.nodes.len();
        let parallelism = parallelism.unwrap_or(st.graph.config.parallelism);
        st.graph.nodes.push(Node {
            id,
            name,
            uid: None,
            parallelism,
            created_at: at,
            kind,
            output,
        });
        for (input, (s, partitioning)) in inputs.into_iter().enumerate() {
            st.graph.edges.push(Edge {
                from: s.node,
                port: s.port,
                to: id,
                input,
                partitioning,
            });
        }
        id
    }

    /// Nodes added so far.
    pub fn node_count(&self) -> usize {
        self.state.borrow().graph.nodes.len()
    }

    /// The first error made while building so far, if any (it stays for [`JobBuilder::build`]).
    pub fn pending_error(&self) -> Option<String> {
        self.state.borrow().error.as_ref().map(|e| e.to_string())
    }

    /// The finished graph, or the first error made while building it.
    ///
    /// Forward edges between nodes of different parallelism become rebalance edges.
    pub fn build(&self) -> Result<JobGraph> {
        let mut st = self.state.borrow_mut();
        if let Some(e) = st.error.take() {
            return Err(e);
        }
        let mut g = st.graph.clone();
        let par: Vec<usize> = g.nodes.iter().map(|n| n.parallelism).collect();
        for e in &mut g.edges {
            if e.partitioning == Partitioning::Forward && par[e.from] != par[e.to] {
                e.partitioning = Partitioning::Rebalance;
            }
        }
        g.validate()?;
        Ok(g)
    }
}

/// A stream of batches: one output port of one node.
#[derive(Clone)]
pub struct Stream {
    job: JobBuilder,
    node: usize,
    port: Port,
}

/// A stream partitioned by key: operators applied to it see all rows of a key in one subtask.
#[derive(Clone)]
pub struct KeyedStream {
    stream: Stream,
    keys: Vec<String>,
}

impl Stream {
    /// The job this stream belongs to.
    pub fn job(&self) -> &JobBuilder {
        &self.job
    }

    /// The node's id in the graph.
    pub fn node_id(&self) -> usize {
        self.node
    }

    pub fn schema(&self) -> SchemaRef {
        self.job.state.borrow().graph.nodes[self.node]
            .output
            .schema
            .clone()
    }

    pub fn event_time(&self) -> Option<String> {
        self.job.state.borrow().graph.nodes[self.node]
            .output
            .event_time
            .clone()
    }

    /// Gives the node that produces this stream an id of its own (Flink's `uid`): its state
    /// in checkpoints goes by it, so the node keeps its state when it is renamed or what
    /// feeds it changes. Letters, digits, `_`, `-`, `.`; unique in the job.
    pub fn uid(self, uid: impl Into<String>) -> Stream {
        self.job.state.borrow_mut().graph.nodes[self.node].uid = Some(uid.into());
        self
    }

    /// Sets the parallelism of the node that produces this stream.
    pub fn parallelism(self, parallelism: usize) -> Stream {
        self.job.state.borrow_mut().graph.nodes[self.node].parallelism = parallelism;
        self
    }

    /// Applies an operator to this stream (forward or rebalanced).
    #[track_caller]
    pub fn apply(&self, name: impl Into<String>, factory: Arc<dyn OperatorFactory>) -> Stream {
        let at = here(Location::caller());
        self.apply_at(name.into(), factory, Partitioning::Forward, at)
    }

    fn apply_at(
        &self,
        name: String,
        factory: Arc<dyn OperatorFactory>,
        partitioning: Partitioning,
        at: String,
    ) -> Stream {
        let id = self.job.add(
            name,
            NodeKind::Operator { factory },
            vec![(self, partitioning)],
            at,
            None,
        );
        Stream {
            job: self.job.clone(),
            node: id,
            port: Port::Main,
        }
    }

    /// Applies an operator over an edge with the given partitioning (for plans built by
    /// extension traits, such as two-phase aggregation).
    pub fn apply_with(
        &self,
        name: String,
        factory: Arc<dyn OperatorFactory>,
        partitioning: Partitioning,
        at: String,
    ) -> Stream {
        self.apply_at(name, factory, partitioning, at)
    }

    /// Keeps the rows where `predicate` is true.
    #[track_caller]
    pub fn filter(&self, predicate: Expr) -> Stream {
        let at = here(Location::caller());
        self.apply_at(
            "filter".into(),
            Arc::new(ops::Filter { predicate }),
            Partitioning::Forward,
            at,
        )
    }

    /// Computes new columns: `[(name, expr), ...]`.
    #[track_caller]
    pub fn project<S: Into<String>>(&self, columns: impl IntoIterator<Item = (S, Expr)>) -> Stream {
        let at = here(Location::caller());
        let columns = columns.into_iter().map(|(n, e)| (n.into(), e)).collect();
        self.apply_at(
            "project".into(),
            Arc::new(ops::Project { columns }),
            Partitioning::Forward,
            at,
        )
    }

    /// Applies a Rust function to every batch; it must keep every row. The graph can then be
    /// printed but not read back from JSON.
    #[track_caller]
    pub fn map_batches(
        &self,
        name: impl Into<String>,
        output_schema: SchemaRef,
        f: impl Fn(arrow_array::RecordBatch) -> Result<arrow_array::RecordBatch> + Send + Sync + 'static,
    ) -> Stream {
        let at = here(Location::caller());
        let name = name.into();
        let event_time = self
            .event_time()
            .filter(|et| output_schema.index_of(et).is_ok());
        let factory = ops::MapBatches {
            name: name.clone(),
            output_schema,
            event_time,
            f: Arc::new(f),
        };
        self.apply_at(name, Arc::new(factory), Partitioning::Forward, at)
    }

    /// Removes late rows (counted, and available as `.late_rows()` of the result).
    #[track_caller]
    pub fn drop_late(&self) -> Stream {
        let at = here(Location::caller());
        self.apply_at(
            "drop_late".into(),
            Arc::new(ops::DropLate {}),
            Partitioning::Forward,
            at,
        )
    }

    /// The late rows the operator producing this stream set aside (of its first input).
    pub fn late_rows(&self) -> Stream {
        self.late_rows_of(0)
    }

    /// The late rows of logical input `input` (0 = left, 1 = right for joins) that the
    /// operator producing this stream set aside.
    pub fn late_rows_of(&self, input: usize) -> Stream {
        Stream {
            job: self.job.clone(),
            node: self.node,
            port: Port::Late(input),
        }
    }

    /// Merges this stream with others of the same schema.
    #[track_caller]
    pub fn union(&self, others: &[Stream]) -> Stream {
        let at = here(Location::caller());
        let mut inputs = vec![(self, Partitioning::Rebalance)];
        inputs.extend(others.iter().map(|s| (s, Partitioning::Rebalance)));
        let id = self.job.add(
            "union".into(),
            NodeKind::Operator {
                factory: Arc::new(ops::Union {}),
            },
            inputs,
            at,
            None,
        );
        Stream {
            job: self.job.clone(),
            node: id,
            port: Port::Main,
        }
    }

    /// Partitions the stream by the named columns over the job's key groups.
    pub fn key_by<S: AsRef<str>>(&self, keys: &[S]) -> KeyedStream {
        KeyedStream {
            stream: self.clone(),
            keys: keys.iter().map(|k| k.as_ref().to_string()).collect(),
        }
    }

    /// Writes the stream to a sink.
    #[track_caller]
    pub fn sink(&self, name: impl Into<String>, factory: impl SinkFactory + 'static) {
        let at = here(Location::caller());
        self.sink_through(
            name.into(),
            Arc::new(factory),
            Partitioning::Forward,
            at,
            None,
        );
    }

    /// Writes the stream to a sink with its own parallelism.
    #[track_caller]
    pub fn sink_arc(
        &self,
        name: impl Into<String>,
        factory: Arc<dyn SinkFactory>,
        parallelism: Option<usize>,
    ) {
        let at = here(Location::caller());
        self.sink_through(name.into(), factory, Partitioning::Forward, at, parallelism);
    }

    fn sink_through(
        &self,
        name: String,
        factory: Arc<dyn SinkFactory>,
        edge: Partitioning,
        at: String,
        parallelism: Option<usize>,
    ) {
        self.job.add(
            name,
            NodeKind::Sink { factory },
            vec![(self, edge)],
            at,
            parallelism,
        );
    }
}

impl KeyedStream {
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Applies a keyed operator: all rows of a key reach the same subtask.
    #[track_caller]
    pub fn apply(&self, name: impl Into<String>, factory: Arc<dyn OperatorFactory>) -> Stream {
        let at = here(Location::caller());
        self.apply_at(name.into(), factory, at)
    }

    /// Applies an operator to this stream with each key's rows spread over `salts` subtasks
    /// (all keys, or with `hot_share` only those above that share of the rows). Refused when
    /// the job is built unless the operator's per-key state merges (see
    /// `OperatorFactory::key_ordered`).
    #[track_caller]
    pub fn apply_salted(
        &self,
        name: impl Into<String>,
        factory: Arc<dyn OperatorFactory>,
        salts: u16,
        hot_share: Option<f64>,
    ) -> Stream {
        let at = here(Location::caller());
        self.apply_salted_at(name.into(), factory, salts, hot_share, at)
    }

    /// As [`KeyedStream::apply_salted`], with the caller's location given.
    pub fn apply_salted_at(
        &self,
        name: String,
        factory: Arc<dyn OperatorFactory>,
        salts: u16,
        hot_share: Option<f64>,
        at: String,
    ) -> Stream {
        let key_groups = self.stream.job.state.borrow().graph.config.key_groups;
        self.stream.apply_at(
            name,
            factory,
            Partitioning::Salted {
                keys: self.keys.clone(),
                key_groups,
                salts,
                hot_share,
            },
            at,
        )
    }

    /// As [`KeyedStream::apply`], with the caller's location given (for extension traits).
    pub fn apply_at(&self, name: String, factory: Arc<dyn OperatorFactory>, at: String) -> Stream {
        self.stream.apply_at(name, factory, self.hash_edge(), at)
    }

    /// The edge that brings each key to the subtask owning its key group.
    fn hash_edge(&self) -> Partitioning {
        Partitioning::Hash {
            keys: self.keys.clone(),
            key_groups: self.stream.job.state.borrow().graph.config.key_groups,
        }
    }
}

impl KeyedStream {
    /// Writes the stream to a sink, each key to one sink subtask, so a key's rows reach the
    /// sink in their order (what an upsert sink needs, whatever the parallelism).
    #[track_caller]
    pub fn sink_arc(
        &self,
        name: impl Into<String>,
        factory: Arc<dyn SinkFactory>,
        parallelism: Option<usize>,
    ) {
        let at = here(Location::caller());
        (self.stream).sink_through(name.into(), factory, self.hash_edge(), at, parallelism);
    }
}

impl KeyedStream {
    /// Applies a two-input keyed operator (a join): this stream is input 0 (left), `right` is
    /// input 1; both are partitioned by their keys, so equal keys meet in one subtask.
    ///
    /// The key columns of both sides must be as many and of the same types.
    pub fn connect_at(
        &self,
        right: &KeyedStream,
        name: String,
        factory: Arc<dyn OperatorFactory>,
        at: String,
    ) -> Stream {
        let job = &self.stream.job;
        if !Rc::ptr_eq(&job.state, &right.stream.job.state) {
            job.fail(Error::plan(format!(
                "`{name}` (created at {at}) joins streams of two different jobs"
            )));
        }
        let (ls, rs) = (self.stream.schema(), right.stream.schema());
        let types = |schema: &SchemaRef, keys: &[String]| -> Vec<Option<arrow_schema::DataType>> {
            keys.iter()
                .map(|k| {
                    schema
                        .field_with_name(k)
                        .ok()
                        .map(|f| f.data_type().clone())
                })
                .collect()
        };
        let (lt, rt) = (types(&ls, &self.keys), types(&rs, &right.keys));
        if lt.len() != rt.len()
            || lt
                .iter()
                .zip(&rt)
                .any(|(a, b)| a.is_some() && b.is_some() && a != b)
        {
            job.fail(Error::plan(format!(
                "`{name}` (created at {at}): the join keys ({}) of the left side and ({}) of the \
                 right side must be as many and of the same types; found {:?} and {:?}",
                self.keys.join(", "),
                right.keys.join(", "),
                lt.iter().flatten().collect::<Vec<_>>(),
                rt.iter().flatten().collect::<Vec<_>>(),
            )));
        }
        let id = job.add(
            name,
            NodeKind::Operator { factory },
            vec![
                (&self.stream, self.hash_edge()),
                (&right.stream, right.hash_edge()),
            ],
            at,
            None,
        );
        Stream {
            job: job.clone(),
            node: id,
            port: Port::Main,
        }
    }
}

/// `file:line` of a `#[track_caller]` caller, for extension traits that build nodes.
#[track_caller]
pub fn caller_location() -> String {
    here(Location::caller())
}
