//! Operator chaining: which nodes run inside the subtasks of the node before them, and that a
//! chained job gives what the same job gives with every node in subtasks of its own.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use weir_core::expr::{col, lit};
use weir_core::SystemClock;
use weir_runtime::graph::{OperatorFactory, StreamInfo};
use weir_runtime::physical::Chains;
use weir_runtime::testing::VecSource;
use weir_runtime::{
    exec, CollectSink, Context, JobBuilder, JobConfig, JobGraph, Operator, Result, SourceOptions,
    StreamBatch, SubtaskInfo,
};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Two splits of `(n, ts)`; some rows of split 1 are late (behind its watermark by 5 s).
fn disordered_source() -> VecSource {
    let schema = Arc::new(Schema::new(vec![
        Field::new("n", DataType::Int64, false),
        Field::new("ts", DataType::Int64, false),
    ]));
    let batch = |ns: Vec<i64>, ts: Vec<i64>| {
        RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(ns)),
                Arc::new(Int64Array::from(ts)),
            ],
        )
        .unwrap()
    };
    VecSource::new(
        schema.clone(),
        vec![
            (0..20)
                .map(|b| {
                    batch(
                        (b * 5..b * 5 + 5).collect(),
                        (0..5).map(|i| (b * 5 + i) * 1_000).collect(),
                    )
                })
                .collect(),
            vec![
                batch(vec![1_000, 1_001], vec![10_000, 20_000]),
                batch(vec![1_002, 1_003, 1_004], vec![9_000, 15_000, 21_000]),
            ],
        ],
    )
    .unwrap()
}

struct Sinks {
    kept: CollectSink,
    late: CollectSink,
    counted: CollectSink,
}

/// numbers → filter → project → double → drop_late (the last three chained into the filter),
/// then sink `kept`, its late rows into
/// sink `late`, and again → at the end (a count at the end of input, by an event-time timer
/// registered when it opens) → sink `counted`.
fn job(parallelism: usize, chaining: bool) -> (JobGraph, Sinks) {
    let job = JobBuilder::with_config(
        "chains",
        JobConfig {
            parallelism,
            batch_rows: 3,
            operator_chaining: chaining,
            ..Default::default()
        },
    );
    let sinks = Sinks {
        kept: CollectSink::new(),
        late: CollectSink::new(),
        counted: CollectSink::new(),
    };
    let projected = job
        .source(
            "numbers",
            disordered_source(),
            SourceOptions::event_time("ts", 5_000),
        )
        .filter(col("n").gt_eq(lit(0)))
        .project([("n", col("n")), ("ts", col("ts"))]);
    let schema = projected.schema();
    let kept = projected
        .map_batches("double", schema.clone(), |b| {
            let n = b.column(0).as_primitive::<Int64Type>();
            let doubled: Int64Array = n.unary(|v| v * 2);
            Ok(RecordBatch::try_new(
                b.schema(),
                vec![Arc::new(doubled), b.column(1).clone()],
            )?)
        })
        .drop_late();
    kept.sink("kept", sinks.kept.clone());
    kept.late_rows().sink("late", sinks.late.clone());
    kept.map_batches("again", schema, Ok)
        .apply("at the end", Arc::new(AtTheEnd))
        .sink("counted", sinks.counted.clone());
    (job.build().unwrap(), sinks)
}

fn values(sink: &CollectSink) -> Vec<i64> {
    let mut v: Vec<i64> = sink
        .batches()
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    v.sort_unstable();
    v
}

fn id(graph: &JobGraph, name: &str) -> usize {
    graph.nodes.iter().find(|n| n.name == name).unwrap().id
}

#[test]
fn operators_chain_into_the_node_before_them_over_a_forward_edge_it_alone_takes() {
    let (graph, _) = job(2, true);
    let chains = Chains::of(&graph);
    // Nothing runs in a source's subtasks: reading keeps a subtask of its own.
    assert!(
        chains.followers(id(&graph, "numbers")).is_empty(),
        "{graph}"
    );
    let filter = id(&graph, "filter");
    assert!(!chains.is_chained(filter));
    let chained: Vec<usize> = ["project", "double", "drop_late"]
        .iter()
        .map(|n| id(&graph, n))
        .collect();
    assert_eq!(chains.followers(filter), chained, "{graph}");
    let drop_late = id(&graph, "drop_late");
    assert_eq!(chains.head(drop_late), filter);
    // Its late rows leave the chain from it, as its main output does.
    assert_eq!(chains.tail(filter), drop_late);
    // `drop_late` has three consumers: none of them runs in its subtasks.
    let again = id(&graph, "again");
    assert!(!chains.is_chained(again), "{graph}");
    assert_eq!(chains.followers(again), vec![id(&graph, "at the end")]);
    for n in &graph.nodes {
        if matches!(n.kind, weir_runtime::graph::NodeKind::Sink { .. }) {
            assert!(!chains.is_chained(n.id), "sinks are never chained");
        }
    }
    let plan = graph.to_string();
    assert!(plan.contains("<- [0] forward\n"), "{plan}");
    assert!(plan.contains("<- [1] forward, chained"), "{plan}");

    let (unchained, _) = job(2, false);
    let none = Chains::of(&unchained);
    assert!((0..unchained.nodes.len()).all(|n| !none.is_chained(n)));
    let plan = unchained.to_string();
    assert!(!plan.contains(", chained"), "{plan}");
    assert!(plan.contains("(0 operators chained into them)"), "{plan}");
}

#[test]
fn a_chained_job_gives_what_it_gives_unchained_with_each_operators_own_metrics() {
    for parallelism in [1, 2] {
        let mut reports = Vec::new();
        let mut outputs = Vec::new();
        for chaining in [true, false] {
            let (graph, sinks) = job(parallelism, chaining);
            let report = rt()
                .block_on(exec::run(graph, Arc::new(SystemClock)))
                .unwrap();
            outputs.push([
                values(&sinks.kept),
                values(&sinks.late),
                values(&sinks.counted),
            ]);
            reports.push(report);
        }
        assert_eq!(outputs[0], outputs[1], "parallelism {parallelism}");
        let [kept, late, counted] = &outputs[0];
        assert_eq!(
            late,
            &vec![2_004, 2_006],
            "1_002 and 1_003 are late, doubled"
        );
        assert_eq!(kept.len(), 103);
        assert_eq!(
            counted.iter().sum::<i64>(),
            103,
            "every kept row, counted at the end: {counted:?}"
        );
        let (chained, unchained) = (&reports[0].metrics, &reports[1].metrics);
        for (a, b) in chained.nodes.iter().zip(&unchained.nodes) {
            assert_eq!(
                (a.rows_in, a.rows_out, a.late_rows),
                (b.rows_in, b.rows_out, b.late_rows),
                "node `{}` at parallelism {parallelism}",
                a.name
            );
            assert!(b.chained_into.is_none());
        }
        assert_eq!(chained.node("drop_late").unwrap().chained_into, Some(1));
        assert_eq!(chained.node("drop_late").unwrap().late_rows, 2);
        assert!(chained.node("at the end").unwrap().chained_into.is_some());
        assert!(
            chained.in_flight_bound_rows < unchained.in_flight_bound_rows,
            "chained edges have no channel"
        );
        for n in &chained.nodes {
            assert!(
                n.subtasks.iter().all(|s| s.finished) || n.kind.starts_with("source"),
                "`{}` finished",
                n.name
            );
        }
    }
}

/// Counts its input rows and emits the count when the watermark reaches the end: an
/// event-time timer registered at open, under one key.
#[derive(Debug)]
struct AtTheEnd;

impl OperatorFactory for AtTheEnd {
    fn kind(&self) -> &'static str {
        "at_the_end"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({})
    }
    fn plan(&self, _inputs: &[StreamInfo]) -> Result<StreamInfo> {
        Ok(StreamInfo {
            schema: Arc::new(Schema::new(vec![Field::new(
                "rows",
                DataType::Int64,
                false,
            )])),
            event_time: None,
        })
    }
    fn create(&self, _inputs: &[StreamInfo], _info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(AtTheEndOp { rows: 0 }))
    }
}

struct AtTheEndOp {
    rows: i64,
}

impl Operator for AtTheEndOp {
    fn open(&mut self, ctx: &mut Context) -> Result<()> {
        ctx.register_event_timer(i64::MAX, b"end");
        Ok(())
    }
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, _ctx: &mut Context) -> Result<()> {
        self.rows += batch.num_rows() as i64;
        Ok(())
    }
    fn on_timer(&mut self, _timer: weir_runtime::Timer, ctx: &mut Context) -> Result<()> {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "rows",
            DataType::Int64,
            false,
        )]));
        let b = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![self.rows]))])?;
        ctx.emit(StreamBatch::new(b));
        Ok(())
    }
}

/// Emits one row (`n` = -1) when it opens, then passes its input on; refuses input before it
/// was opened.
#[derive(Debug)]
struct Announces;

impl OperatorFactory for Announces {
    fn kind(&self) -> &'static str {
        "announces"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({})
    }
    fn plan(&self, inputs: &[StreamInfo]) -> Result<StreamInfo> {
        Ok(inputs[0].clone())
    }
    fn create(&self, inputs: &[StreamInfo], _info: &SubtaskInfo) -> Result<Box<dyn Operator>> {
        Ok(Box::new(AnnouncesOp {
            schema: inputs[0].schema.clone(),
            open: false,
        }))
    }
}

struct AnnouncesOp {
    schema: arrow_schema::SchemaRef,
    open: bool,
}

impl Operator for AnnouncesOp {
    fn open(&mut self, ctx: &mut Context) -> Result<()> {
        self.open = true;
        let b = RecordBatch::try_new(
            self.schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![-1])),
                Arc::new(Int64Array::from(vec![0])),
            ],
        )?;
        ctx.emit(StreamBatch::new(b));
        Ok(())
    }
    fn on_batch(&mut self, _input: usize, batch: StreamBatch, ctx: &mut Context) -> Result<()> {
        if !self.open {
            return Err(weir_runtime::Error::plan("a batch before open"));
        }
        ctx.emit(batch);
        Ok(())
    }
}

#[test]
fn every_chained_operator_is_open_before_any_of_them_gets_a_row() {
    for chaining in [true, false] {
        let job = JobBuilder::with_config(
            "open",
            JobConfig {
                operator_chaining: chaining,
                ..Default::default()
            },
        );
        let out = CollectSink::new();
        job.source(
            "numbers",
            VecSource::numbers(10),
            SourceOptions::event_time("ts", 0),
        )
        .apply("first", Arc::new(Announces))
        .apply("second", Arc::new(Announces))
        .apply("third", Arc::new(Announces))
        .sink("out", out.clone());
        let graph = job.build().unwrap();
        assert_eq!(
            Chains::of(&graph).followers(1).len(),
            if chaining { 2 } else { 0 }
        );
        rt().block_on(exec::run(graph, Arc::new(SystemClock)))
            .unwrap();
        let mut want: Vec<i64> = vec![-1, -1, -1];
        want.extend(0..10);
        assert_eq!(values(&out), want, "chaining {chaining}");
    }
}
