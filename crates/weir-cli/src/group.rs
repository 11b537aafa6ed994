//! `weir run --group NAME`: one member of a group of processes that run a job together over
//! Kafka, as Kafka Streams' instances do, with no cluster manager of weir's own.
//!
//! The job is cut at every keyed edge into stages (the nodes joined by edges that do not
//! re-key), and each stage into tasks, one per partition of its input topics (co-partitioned:
//! task `p` of a stage reads partition `p` of every input topic of the stage). A keyed edge
//! becomes a repartition topic (`weir_connectors::repartition`), named after the group and the
//! node it feeds, with one partition per task of the stage after it: the tasks before it write
//! each row to the partition that owns its key group, with the rows' watermarks, their own
//! watermarks and their checkpoints' commits, and each task after it reads its partition,
//! passing rows on only once their writer's checkpoint is complete, so that the job's output
//! is a single run's, exactly once. Each task is its stage at parallelism 1, numbered over all
//! stages, with checkpoints of its own in `<checkpoint folder>/task-<n>` and its own name
//! (`<job>.task-<n>`), so that an exactly-once sink keeps each task's progress apart.
//!
//! The members find each other in the checkpoint location, which they all reach anyway
//! ([`roster`]): in a shared folder each holds the lock of its own file in `_group/` while its
//! process lives, so a member killed with -9 is gone the moment the OS releases its locks; in
//! object storage each holds a lease, so it is gone once its lease has ended. Every member
//! looks at the others every 300 ms and computes the same assignment from the same members (rendezvous hashing bounded
//! by an even share): it hands back the tasks that are no longer its own (stopped, their
//! folders released) and starts the ones that are, each from its newest checkpoint as
//! `--restore latest` does, once it holds the task's checkpoint location, so no task ever runs
//! twice, even while two members' views of the group differ.
//!
//! Not through a Kafka consumer group (as the design first said): the test broker's group
//! coordinator (tansu 0.6) loses partitions when a member's session expires, the surviving
//! members never told to rejoin (seen with plain librdkafka consumers), so failover could not
//! be tested; and the folder's locks fence a task's two owners, which a group's assignment
//! alone does not.
//!
//! What a task does is what its stage does with its partitions' rows. That is the job's answer
//! when every operator that keeps state is fed only by re-keyed rows: other exchanges
//! (broadcast, salting) and state fed otherwise (the partial phase of a two-phase
//! aggregation) are refused rather than run per partition.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use weir_connectors::repartition::{RepartitionSink, RepartitionTopic};
use weir_core::SystemClock;
use weir_runtime::exec::{self, JobReport, StopHandle};
use weir_runtime::graph::{NodeKind, OperatorState};
use weir_runtime::sink::Delivery;
use weir_runtime::{JobGraph, Location, Partitioning};

mod roster;
use roster::Roster;

/// A job planned to run as a group: the checks passed, and what the tasks are.
pub struct Plan {
    /// The group's name.
    pub name: String,
    /// The first input topic, for messages.
    topic: String,
    /// How many tasks there are, over all stages.
    pub tasks: usize,
    /// The job at parallelism 1, reading every partition.
    graph: JobGraph,
    /// The job cut at its keyed edges; a task's graph is made from its stage's.
    stages: Vec<Stage>,
    /// The repartition topics between the stages, which the members make.
    repartition: Vec<RepartitionTopic>,
    /// How long the repartition topics keep their records (when a member makes them).
    pub repartition_retention_ms: i64,
}

/// A stage of a job run as a group: nodes joined by edges that do not re-key, run as tasks of
/// one partition each, numbered from `first` among the group's tasks.
struct Stage {
    /// The stage's nodes at parallelism 1, with a repartition source for each keyed edge into
    /// the stage and a repartition sink for each keyed edge out of it.
    graph: JobGraph,
    /// For each node of `graph`, the job's node it is (`None`: a repartition topic's).
    origin: Vec<Option<usize>>,
    tasks: usize,
    first: usize,
    /// Its number among the job's stages.
    number: usize,
    /// The stage's Kafka sources (read partition by partition), with their partitions.
    sources: Vec<(Arc<dyn weir_runtime::SourceFactory>, usize)>,
}

/// Checks that `graph` can run as group `name` and cuts it into stages and tasks.
///
/// # Errors
/// A job that cannot: one without checkpoints, with a source that is no Kafka topic or a
/// bounded one, with a stage's topics of different partition counts, with an exchange other
/// than a re-keying one between stages, with a stateful operator not fed by re-keyed rows, or
/// with a sink that writes files; each error names the node and what to do.
pub fn plan(graph: JobGraph, name: &str) -> Result<Plan> {
    if name.trim().is_empty() {
        bail!("--group '': give the group a name");
    }
    let Some(checkpoints) = &graph.config.checkpointing else {
        bail!(
            "--group {name}: the tasks of a group move between processes with their checkpoints; \
             give --checkpoint-interval (or SET 'execution.checkpointing.interval') and a \
             checkpoint folder every process of the group reaches (--checkpoint-dir, or SET \
             'execution.checkpointing.dir': a folder on a file system they share)"
        );
    };
    if let Some(r) = checkpoints.restore.as_deref().filter(|r| *r != "latest") {
        bail!(
            "--restore {r}: in a group each task goes on from its own newest checkpoint (under \
             the checkpoint folder's task-N folders), which is what --restore latest means; a \
             checkpoint or savepoint of a single run does not split into tasks"
        );
    }
    // A keyed edge becomes a repartition topic between two stages; any other exchange that
    // moves rows between subtasks cannot cross tasks.
    for e in &graph.edges {
        let (from, to) = (&graph.nodes[e.from].name, &graph.nodes[e.to].name);
        match &e.partitioning {
            Partitioning::Forward | Partitioning::Rebalance => {}
            Partitioning::Hash { .. } if e.port == weir_runtime::Port::Main => {}
            Partitioning::Hash { .. } => bail!(
                "`{from}` → `{to}` re-keys the late rows of `{from}`: a group re-keys only an \
                 operator's results between its tasks; run this job as a single process \
                 (without --group)"
            ),
            other => bail!(
                "`{from}` → `{to}` is partitioned by {other}: a group passes rows between its \
                 tasks only re-keyed by a key (a repartition topic), not broadcast or salted; \
                 run this job as a single process (without --group){}",
                if matches!(other, Partitioning::Salted { .. }) {
                    ", or leave the aggregation's salting out ('table.optimizer.distinct-agg.\
                     split.enabled', 'weir.skew.*')"
                } else {
                    ""
                }
            ),
        }
    }
    let inputs = graph.inputs_by_node();
    let mut logs: Vec<Option<weir_runtime::LogPartitions>> = vec![None; graph.nodes.len()];
    for n in &graph.nodes {
        if n.parallelism != 1 {
            bail!(
                "`{}` runs at parallelism {}: in a group each task runs at parallelism 1, and \
                 the work spreads over the tasks (one per partition of the input topics): give \
                 the topics more partitions and start more processes, and leave --parallelism \
                 and 'parallelism.default' out",
                n.name,
                n.parallelism
            );
        }
        match &n.kind {
            NodeKind::Source { factory, .. } => {
                let Some(log) = factory.log_partitions()? else {
                    bail!(
                        "source `{}` ({}) is no Kafka topic: a group cuts its input into tasks \
                         by partition, and every input must be a topic",
                        n.name,
                        factory.kind()
                    );
                };
                if factory.bounded() {
                    bail!(
                        "source `{}` is bounded (scan.bounded.mode): a group runs unbounded \
                         topics; run a bounded read as a single process",
                        n.name
                    );
                }
                logs[n.id] = Some(log);
            }
            NodeKind::Operator { factory } => {
                // Keyed state is whole in a task only when the task has every row of its keys:
                // rows re-keyed into it. Fed otherwise, it would hold one partition's rows.
                let keyed = !inputs[n.id].is_empty()
                    && (inputs[n.id].iter())
                        .all(|e| matches!(e.partitioning, Partitioning::Hash { .. }));
                if factory.state() != OperatorState::Stateless && !keyed {
                    bail!(
                        "operator `{}` ({}) keeps state and is not fed by rows re-keyed for it: \
                         in a group a task reads only its own partitions, so it would see a part \
                         of its keys' rows; run this job as a single process (without --group)",
                        n.name,
                        factory.describe()
                    );
                }
            }
            NodeKind::Sink { factory } => {
                if factory.kind() == "rate_limited" {
                    bail!(
                        "sink `{}` is held to a rate over all its subtasks, and each task of a \
                         group is a job of its own: a group of rate-limited sinks is not built \
                         yet; leave 'weir.sink.rate-limit' out",
                        n.name
                    );
                }
                if let Some(Location::File(path)) =
                    (factory.writes(1, true).into_iter()).find(|l| matches!(l, Location::File(_)))
                {
                    bail!(
                        "sink `{}` writes the file {}, which every task of the group would \
                         write: write to a table or a topic",
                        n.name,
                        path.display()
                    );
                }
                if factory.delivery(true) == Delivery::ExactlyOnce
                    && factory.for_task("task-0")?.is_none()
                {
                    bail!(
                        "sink `{}` ({}) is exactly once by the job's progress, which it cannot \
                         keep apart for each task of a group",
                        n.name,
                        factory.kind()
                    );
                }
            }
        }
    }
    let Some(first_log) = logs.iter().flatten().next().cloned() else {
        bail!("the job has no source");
    };
    // A job without keyed edges is one stage however its parts connect (a statement set of
    // independent INSERTs), so its tasks are numbered as they always were.
    let keyed = (graph.edges.iter()).any(|e| matches!(e.partitioning, Partitioning::Hash { .. }));
    let stage_of = if keyed {
        stages_of(&graph)?
    } else {
        vec![0; graph.nodes.len()]
    };
    let n_stages = stage_of.iter().max().map_or(0, |m| m + 1);
    // Each stage runs one task per partition of its topics, which must agree (co-partitioned);
    // a stage fed only by repartition topics runs as many as the most partitioned input topic.
    let mut partitions: Vec<Option<(String, usize)>> = vec![None; n_stages];
    for (id, log) in logs.iter().enumerate() {
        let Some(log) = log else { continue };
        match &partitions[stage_of[id]] {
            None => partitions[stage_of[id]] = Some((log.topic.clone(), log.partitions)),
            Some((first, count)) if *count != log.partitions => bail!(
                "source `{}` reads topic {} of {} partitions, and topic {first} has {count}, \
                 both read by one stage of the group (no re-keying between them): its tasks \
                 read the same partition of every input topic (co-partitioned), so the topics \
                 need as many partitions each",
                graph.nodes[id].name,
                log.topic,
                log.partitions
            ),
            Some(_) => {}
        }
    }
    let widest = logs
        .iter()
        .flatten()
        .map(|l| l.partitions)
        .max()
        .unwrap_or(1);
    let stages_tasks: Vec<usize> = (partitions.iter())
        .map(|p| p.as_ref().map_or(widest, |(_, n)| *n))
        .collect();
    let ids = graph.stable_ids();
    let mut repartition = Vec::new();
    // Per keyed edge (by index into the graph's edges), its topic.
    let mut topics: BTreeMap<usize, RepartitionTopic> = BTreeMap::new();
    for (k, e) in graph.edges.iter().enumerate() {
        if !matches!(e.partitioning, Partitioning::Hash { .. }) {
            continue;
        }
        let topic = RepartitionTopic {
            client: first_log.client.clone(),
            topic: repartition_topic_name(name, &ids[e.to], e.input),
            partitions: stages_tasks[stage_of[e.to]],
            writers: stages_tasks[stage_of[e.from]],
        };
        repartition.push(topic.clone());
        topics.insert(k, topic);
    }
    let mut stages = Vec::with_capacity(n_stages);
    let mut first = 0;
    for (s, &tasks) in stages_tasks.iter().enumerate() {
        let sources = (graph.nodes.iter())
            .filter(|n| stage_of[n.id] == s)
            .filter_map(|n| match (&n.kind, &logs[n.id]) {
                (NodeKind::Source { factory, .. }, Some(log)) => {
                    Some((factory.clone(), log.partitions))
                }
                _ => None,
            })
            .collect();
        let (stage_graph, origin) = stage_graph(&graph, &stage_of, s, &topics)?;
        stages.push(Stage {
            graph: stage_graph,
            origin,
            tasks,
            first,
            number: s,
            sources,
        });
        first += tasks;
    }
    Ok(Plan {
        name: name.to_string(),
        topic: first_log.topic,
        tasks: first,
        graph,
        stages,
        repartition,
        repartition_retention_ms: 7 * 24 * 3_600_000,
    })
}

/// The stage of each node: the nodes joined by edges that do not re-key are one stage,
/// numbered in the order of their first node.
///
/// # Errors
/// A keyed edge between two nodes that other edges join into one stage (its rows could not be
/// re-keyed without cutting the stage in two).
fn stages_of(graph: &JobGraph) -> Result<Vec<usize>> {
    let mut parent: Vec<usize> = (0..graph.nodes.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for e in &graph.edges {
        if !matches!(e.partitioning, Partitioning::Hash { .. }) {
            let (a, b) = (root(&mut parent, e.from), root(&mut parent, e.to));
            parent[a.max(b)] = a.min(b);
        }
    }
    for e in &graph.edges {
        if matches!(e.partitioning, Partitioning::Hash { .. })
            && root(&mut parent, e.from) == root(&mut parent, e.to)
        {
            bail!(
                "`{}` → `{}` re-keys rows between two nodes that other edges join without \
                 re-keying: a group cannot cut the job there into tasks; run this job as a \
                 single process (without --group)",
                graph.nodes[e.from].name,
                graph.nodes[e.to].name
            );
        }
    }
    let mut number: BTreeMap<usize, usize> = BTreeMap::new();
    Ok((0..graph.nodes.len())
        .map(|i| {
            let r = root(&mut parent, i);
            let next = number.len();
            *number.entry(r).or_insert(next)
        })
        .collect())
}

/// The repartition topic of the keyed edge into input `input` of the node of stable id `to`:
/// `weir-<group>-<to>-<input>`, in the characters a topic name may have (the run's id is
/// added when a member joins: [`Plan::bind_run`]).
fn repartition_topic_name(group: &str, to: &str, input: usize) -> String {
    let name = format!("weir-{group}-{to}-{input}");
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Node `id` of a stage's job reading or writing repartition topic `topic` (`kind`), carrying
/// the stream of `from`, the node before the keyed edge.
fn repartition_node(
    id: usize,
    topic: &RepartitionTopic,
    from: &weir_runtime::graph::Node,
    kind: NodeKind,
) -> weir_runtime::graph::Node {
    weir_runtime::graph::Node {
        id,
        name: format!("repartition {}", topic.topic),
        uid: None,
        parallelism: 1,
        created_at: from.created_at.clone(),
        kind,
        output: from.output.clone(),
    }
}

/// Stage `stage`'s job: its nodes in their order, after a repartition source for each keyed
/// edge into the stage and before a repartition sink for each keyed edge out of it (writer 0:
/// a task's graph numbers its own).
fn stage_graph(
    graph: &JobGraph,
    stage_of: &[usize],
    stage: usize,
    topics: &BTreeMap<usize, RepartitionTopic>,
) -> Result<(JobGraph, Vec<Option<usize>>)> {
    use weir_connectors::repartition::{
        RepartitionSink, RepartitionSinkSpec, RepartitionSource, RepartitionSourceSpec,
    };
    use weir_runtime::graph::{Edge, Node};
    let mut nodes: Vec<Node> = Vec::new();
    let mut origin: Vec<Option<usize>> = Vec::new();
    let mut edges: Vec<Edge> = Vec::new();
    let mut pending: Vec<(usize, Edge)> = Vec::new();
    for (k, topic) in topics {
        let e = &graph.edges[*k];
        if stage_of[e.to] != stage {
            continue;
        }
        let from = &graph.nodes[e.from];
        let id = nodes.len();
        let kind = NodeKind::Source {
            factory: Arc::new(RepartitionSource::new(RepartitionSourceSpec {
                topic: topic.clone(),
                schema: from.output.schema.as_ref().clone(),
                read: None,
            })),
            watermarks: Default::default(),
        };
        nodes.push(repartition_node(id, topic, from, kind));
        origin.push(None);
        pending.push((
            e.to,
            Edge {
                from: id,
                port: weir_runtime::Port::Main,
                to: e.to,
                input: e.input,
                partitioning: Partitioning::Forward,
            },
        ));
    }
    let mut new_id: BTreeMap<usize, usize> = BTreeMap::new();
    for n in graph.nodes.iter().filter(|n| stage_of[n.id] == stage) {
        let id = nodes.len();
        new_id.insert(n.id, id);
        origin.push(Some(n.id));
        let mut n = n.clone();
        n.id = id;
        nodes.push(n);
    }
    for (to, mut e) in pending {
        e.to = new_id[&to];
        edges.push(e);
    }
    for e in (graph.edges.iter()).filter(|e| stage_of[e.from] == stage && stage_of[e.to] == stage) {
        edges.push(Edge {
            from: new_id[&e.from],
            to: new_id[&e.to],
            ..e.clone()
        });
    }
    for (k, topic) in topics {
        let e = &graph.edges[*k];
        if stage_of[e.from] != stage {
            continue;
        }
        let Partitioning::Hash { keys, key_groups } = &e.partitioning else {
            continue;
        };
        let kind = NodeKind::Sink {
            factory: Arc::new(RepartitionSink {
                spec: RepartitionSinkSpec {
                    topic: topic.clone(),
                    keys: keys.clone(),
                    key_groups: *key_groups,
                    writer: 0,
                },
            }),
        };
        let id = nodes.len();
        nodes.push(repartition_node(id, topic, &graph.nodes[e.from], kind));
        origin.push(None);
        edges.push(Edge {
            from: new_id[&e.from],
            port: e.port,
            to: id,
            input: 0,
            partitioning: Partitioning::Forward,
        });
    }
    let g = JobGraph {
        name: graph.name.clone(),
        config: graph.config.clone(),
        nodes,
        edges,
    };
    g.validate()
        .with_context(|| format!("stage {stage} of the job, cut at its keyed edges"))?;
    Ok((g, origin))
}

/// `path` with `.task-<p>` before its extension: `dl.jsonl` → `dl.task-3.jsonl` (as a
/// backfill's suffix goes into a file's name).
fn task_path(path: &Path, task: i32) -> PathBuf {
    PathBuf::from(weir_sql::with_suffix(
        "filesystem",
        &path.to_string_lossy(),
        &format!(".task-{task}"),
    ))
}

/// `dir` (a checkpoint location) as a local path: a `file://` URL's path.
fn local_dir(dir: &Path) -> PathBuf {
    match dir.to_string_lossy().strip_prefix("file://") {
        Some(path) => PathBuf::from(path),
        None => dir.to_path_buf(),
    }
}

/// Refuses a job run alone with its checkpoints in a group's folder (`_group` in it), running
/// or not: it would not see the tasks' progress, and would start over and write everything
/// again.
///
/// # Errors
/// The folder is a group's.
pub fn refuse_group_folder(dir: &Path) -> Result<()> {
    if roster::holds_group(dir)? {
        bail!(
            "checkpoint folder {}: it holds a group's checkpoints (task-N, _group; weir run \
             --group), whose tasks' progress a job run alone would not see (it would start \
             over and write everything again): run the job with --group, or give it another \
             folder",
            local_dir(dir).display()
        );
    }
    Ok(())
}

impl Plan {
    /// The job the tasks run (at parallelism 1, reading every partition).
    pub fn graph(&self) -> &JobGraph {
        &self.graph
    }

    /// Names the repartition topics after the group's run (`<name>-<run>`), which the first
    /// member of a new checkpoint folder picks: a group started again from nothing (its folder
    /// made anew) never reads the rows an earlier run left in its topics.
    ///
    /// # Errors
    /// A repartition node whose settings do not read back.
    fn bind_run(&mut self, run: &str) -> Result<()> {
        use weir_connectors::repartition::RepartitionSource;
        let rename = |t: &mut RepartitionTopic| t.topic = format!("{}-{run}", t.topic);
        for t in &mut self.repartition {
            rename(t);
        }
        for stage in &mut self.stages {
            for n in &mut stage.graph.nodes {
                match &mut n.kind {
                    NodeKind::Source { factory, .. } => {
                        if let Some(f) =
                            RepartitionSource::changed(factory.as_ref(), |s| rename(&mut s.topic))?
                        {
                            *factory = f;
                        }
                    }
                    NodeKind::Sink { factory } => {
                        if let Some(f) =
                            RepartitionSink::changed(factory.as_ref(), |s| rename(&mut s.topic))?
                        {
                            *factory = f;
                        }
                    }
                    NodeKind::Operator { .. } => {}
                }
            }
        }
        Ok(())
    }

    /// The stage of task `task`, and the partition it reads.
    fn stage_of_task(&self, task: i32) -> (&Stage, i32) {
        let t = task as usize;
        let stage = (self.stages.iter())
            .find(|s| t >= s.first && t < s.first + s.tasks)
            .expect("a task of the plan");
        (stage, (t - stage.first) as i32)
    }

    /// Task `task`'s job: its stage's, every source reading only the task's partition (of a
    /// topic, or of a repartition topic), writing repartition topics as the writer of that
    /// number, named `<job>.task-<task>`, checkpointing into the checkpoint folder's
    /// `task-<task>` and going on from the newest checkpoint there.
    fn task_graph(&self, task: i32) -> Result<JobGraph> {
        let (stage, partition) = self.stage_of_task(task);
        let mut g = stage.graph.clone();
        g.name = format!("{}.task-{task}", g.name);
        for n in &mut g.nodes {
            if let NodeKind::Source { factory, .. } = &mut n.kind {
                *factory = factory
                    .reading_partition(partition)?
                    .with_context(|| format!("source `{}` cannot read one partition", n.name))?;
            }
            if let NodeKind::Sink { factory } = &mut n.kind {
                if let Some(writer) =
                    RepartitionSink::changed(factory.as_ref(), |s| s.writer = partition as usize)?
                {
                    *factory = writer;
                } else if let Some(own) = factory.for_task(&format!("task-{task}"))? {
                    *factory = own;
                }
            }
        }
        if let Some(c) = g.config.checkpointing.as_mut() {
            c.dir = c.dir.join(format!("task-{task}"));
            c.restore = Some("latest".into());
            // A member tries a held task again at its next look rather than wait.
            c.wait_for_lock = false;
        }
        g.config.dead_letter_path =
            (self.graph.config.dead_letter_path.as_deref()).map(|p| task_path(p, task));
        Ok(g)
    }

    /// What task `task` is, for messages: `task 7 (stage 1, partition 3)`, or `task 3` in a
    /// job of one stage.
    fn describe(&self, task: i32) -> String {
        if self.stages.len() < 2 {
            return format!("task {task}");
        }
        let (stage, partition) = self.stage_of_task(task);
        format!(
            "task {task} (stage {}, partition {partition})",
            stage.number
        )
    }

    /// The checkpoint folder, every task's under it (a `file://` URL as its path).
    fn base_dir(&self) -> PathBuf {
        (self.graph.config.checkpointing.as_ref()).map_or_else(PathBuf::new, |c| local_dir(&c.dir))
    }

    /// The job's Kafka sources, whose partitions are counted again while the group runs, each
    /// with the partitions its stage's tasks read.
    fn sources(&self) -> Vec<(Arc<dyn weir_runtime::SourceFactory>, usize)> {
        (self.stages.iter())
            .flat_map(|s| s.sources.iter().cloned())
            .collect()
    }

    /// The checkpoint folder of task `task`, for messages.
    fn task_dir(&self, task: i32) -> String {
        self.base_dir()
            .join(format!("task-{task}"))
            .display()
            .to_string()
    }
}

/// What a member says of partitions added to a topic while the group runs.
const NEW_PARTITIONS: &str = "stop every member and start them again to take the new \
     partitions on: their tasks start as the table's 'scan.startup.mode' says, so with \
     'earliest-offset' they read every record, and with 'latest-offset' or a timestamp the \
     records written to them until then are skipped";

/// What a member of a group of several stages says of partitions added to a topic.
const NEW_PARTITIONS_STAGES: &str = "a group of several stages cannot take new partitions on \
     (its tasks are numbered by them, and its repartition topics have as many): stop every \
     member and start the group again from nothing, in a new checkpoint folder (from the \
     topics' start, or from an event time with 'scan.startup.mode' = 'timestamp')";

/// A fixed 64-bit hash (FNV-1a) of a member and a task: the same in every process and version,
/// so that every member computes the same assignment from the same members.
fn weight(member: &str, task: usize) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in member.bytes().chain((task as u64).to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Which member (an index into `members`) runs each of `tasks` tasks: rendezvous hashing (each
/// task to the member of highest weight for it) bounded by an even share (at most
/// `ceil(tasks / members)` each), so the load is even and a member's leaving or joining moves
/// few tasks. `members` must not be empty.
fn assign(tasks: usize, members: &[String]) -> Vec<usize> {
    let share = tasks.div_ceil(members.len().max(1));
    let mut load = vec![0usize; members.len()];
    (0..tasks)
        .map(|t| {
            let mut order: Vec<usize> = (0..members.len()).collect();
            order.sort_by_key(|&m| std::cmp::Reverse((weight(&members[m], t), m)));
            let m = order
                .into_iter()
                .find(|&m| load[m] < share)
                .expect("an even share leaves room for every task");
            load[m] += 1;
            m
        })
        .collect()
}

/// A task this member holds.
enum Slot {
    Running {
        stop: StopHandle,
        handle: tokio::task::JoinHandle<weir_runtime::Result<JobReport>>,
        /// The checkpoint it went on from.
        restored: Option<u64>,
        reporter: weir_runtime::metrics::MetricsReporter,
        started: weir_core::time::ProcTime,
        /// How often it has failed and started again here.
        restarts: u32,
        savepoints: exec::SavepointHandle,
    },
    /// Waiting to start (again) at `at` (ms on the monotonic clock, [`now_ms`]): its
    /// checkpoint folder is still held (by its previous owner, which has not stopped yet), or
    /// it failed and restarts.
    Waiting { at: u64, said: bool, restarts: u32 },
    /// Its input ended.
    Finished,
}

/// Milliseconds on the system's monotonic clock.
fn now_ms() -> u64 {
    weir_core::time::Clock::monotonic_nanos(&SystemClock) / 1_000_000
}

/// How often a member looks at who else is in the group.
const LOOK_EVERY: Duration = Duration::from_millis(300);

/// Runs this member of the group until a signal stops it; returns the exit code.
///
/// # Errors
/// A task that fails in a way a restart cannot mend (a refused plan, a bad record with the
/// `fail` policy), or a group folder that cannot be read.
pub async fn run(
    plan: Plan,
    http: Option<(Arc<weir_http::JobView>, std::net::SocketAddr)>,
    listeners: &crate::supervise::Listeners,
) -> Result<i32> {
    let (view, addr) = match http {
        Some((view, addr)) => (Some(view), Some(addr)),
        None => (None, None),
    };
    let mut signals = listeners.lock().await;
    let crate::supervise::Signals { term, int, usr1 } = &mut *signals;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "host".into());
    let started_ms = weir_core::time::Clock::now(&SystemClock).0;
    let me = format!("{host}-{}-{started_ms}", std::process::id());
    let mut plan = plan;
    let roster = Roster::join(&plan, &me, addr)?;
    if !plan.repartition.is_empty() {
        plan.bind_run(&roster.run)?;
    }
    for topic in &plan.repartition {
        topic
            .ensure(plan.repartition_retention_ms)
            .await
            .with_context(|| format!("the repartition topic {}", topic.topic))?;
    }
    if plan.stages.len() < 2 {
        eprintln!(
            "weir: group {}: member {me}; {} tasks (partitions of {}), checkpoints under {}",
            plan.name,
            plan.tasks,
            plan.topic,
            plan.base_dir().display()
        );
    } else {
        let stages: Vec<String> = (plan.stages.iter().enumerate())
            .map(|(i, s)| format!("stage {i}: tasks {}-{}", s.first, s.first + s.tasks - 1))
            .collect();
        eprintln!(
            "weir: group {}: member {me}; {} tasks in {} stages ({}) re-keyed through {}; \
             checkpoints under {}",
            plan.name,
            plan.tasks,
            plan.stages.len(),
            stages.join(", "),
            (plan.repartition.iter())
                .map(|t| t.topic.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            plan.base_dir().display()
        );
    }
    let mut slots: BTreeMap<i32, Slot> = BTreeMap::new();
    let mut members: Vec<String> = Vec::new();
    let mut tick = tokio::time::interval(LOOK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first look after one interval (the first tick is at once), so that members started
    // together see each other before they take tasks.
    tick.tick().await;
    if let Some(view) = &view {
        view.set_status(weir_http::JobStatus::Running);
    }
    let mut looks = 0u64;
    // The job's nodes, by name and kind, as the member's view shows them.
    let nodes: Vec<(String, String)> = (plan.graph.nodes.iter())
        .map(|n| {
            (
                n.name.clone(),
                format!("{} {}", n.kind.role(), n.kind.kind()),
            )
        })
        .collect();
    let mut recount: Option<tokio::task::JoinHandle<Vec<Counted>>> = None;
    let outcome: Result<i32> = loop {
        tokio::select! {
            _ = tick.tick() => {
                if let Err(e) = look(&plan, &roster, &mut members, &mut slots).await {
                    break Err(e);
                }
                looks += 1;
                if let (Some(view), true) = (&view, looks % 3 == 1) {
                    let http = roster.addresses(&members);
                    let (info, parts) = group_info(&plan, &roster.me, &members, http, &mut slots);
                    view.set_group(info);
                    // The job's operators as this member runs them: a subtask per task.
                    let at = weir_core::time::Clock::now(&SystemClock).0;
                    view.publish(weir_runtime::metrics::MetricsSnapshot::merged(&parts, &nodes, at));
                }
                if looks.is_multiple_of(PARTITIONS_EVERY_LOOKS) && recount.is_none() {
                    // Counted aside: brokers out of reach must not hold the looks up.
                    let sources = plan.sources();
                    recount = Some(tokio::task::spawn_blocking(move || {
                        (sources.iter())
                            .map(|(s, n)| (*n, s.log_partitions()))
                            .collect::<Vec<_>>()
                    }));
                }
            }
            counted = async { recount.as_mut().expect("guarded").await }, if recount.is_some() => {
                recount = None;
                let checked = counted
                    .map_err(anyhow::Error::new)
                    .and_then(|c| partitions_unchanged(&plan, c));
                if let Err(e) = checked {
                    break Err(e);
                }
            }
            _ = term.recv() => break Ok(0),
            _ = int.recv() => break Ok(130),
            _ = usr1.recv() => eprintln!(
                "weir: SIGUSR1: a member of a group takes no savepoint of its own; SIGTERM \
                 stops it, handing each of its tasks on with a savepoint"
            ),
        }
    };
    // Every task stopped before the member leaves, so that the next owner never overlaps; a
    // second signal meanwhile (a stop that hangs) ends the process at once.
    let stopping = stop_slots(
        &plan,
        std::mem::take(&mut slots).into_iter().collect(),
        false,
    );
    tokio::select! {
        () = stopping => {}
        _ = term.recv() => {
            eprintln!("weir: SIGTERM while the tasks stop: stopping at once (exit 143)");
            std::process::exit(143);
        }
        _ = int.recv() => {
            eprintln!("weir: SIGINT while the tasks stop: stopping at once (exit 130)");
            std::process::exit(130);
        }
    }
    drop(roster);
    if let Some(view) = &view {
        view.set_status(match &outcome {
            Ok(_) => weir_http::JobStatus::Stopped,
            Err(e) => weir_http::JobStatus::Failed {
                error: format!("{e:#}"),
            },
        });
    }
    if let Ok(code) = &outcome {
        eprintln!(
            "weir: group {}: member {me} left (exit {code}); its tasks go on from their \
             savepoints (or newest checkpoints) on the other members",
            plan.name
        );
    }
    outcome
}

/// Every how many looks a member counts its topics' partitions again (about 10 s).
const PARTITIONS_EVERY_LOOKS: u64 = 33;

/// A topic's partitions counted again, with how many its stage's tasks read.
type Counted = (
    usize,
    weir_runtime::Result<Option<weir_runtime::LogPartitions>>,
);

/// Refuses to go on once a topic has another number of partitions than its stage's tasks: the
/// tasks are fixed while the group runs, and a new partition's records would go unread.
fn partitions_unchanged(plan: &Plan, counted: Vec<Counted>) -> Result<()> {
    for (tasks, c) in counted {
        match c {
            Ok(Some(log)) if log.partitions != tasks => bail!(
                "topic {} has {} partitions now, and group {} reads it with {tasks} tasks: a \
                 group's tasks are fixed while it runs, and the records of a partition added \
                 since would go unread; {}",
                log.topic,
                log.partitions,
                plan.name,
                if plan.stages.len() > 1 {
                    NEW_PARTITIONS_STAGES
                } else {
                    NEW_PARTITIONS
                }
            ),
            Ok(_) => {}
            // The brokers out of reach for a moment: the tasks say so themselves.
            Err(e) => tracing::warn!(error = %e, "cannot count the topics' partitions"),
        }
    }
    Ok(())
}

/// What `/api/v1/group` shows: the members alive, the tasks each runs (as every member
/// computes it), and this member's tasks with their progress; with the snapshot of each of its
/// running tasks, by the partition it reads.
fn group_info(
    plan: &Plan,
    me: &str,
    members: &[String],
    http: BTreeMap<String, String>,
    slots: &mut BTreeMap<i32, Slot>,
) -> (weir_http::GroupInfo, Vec<weir_runtime::metrics::Part>) {
    let owners = assign(plan.tasks, members);
    let assignment = (members.iter().enumerate())
        .map(|(i, m)| {
            let tasks: Vec<usize> = (0..plan.tasks).filter(|&t| owners[t] == i).collect();
            (m.clone(), tasks)
        })
        .collect();
    let stage_partition = |task: i32| {
        let (stage, partition) = plan.stage_of_task(task);
        (stage.number, partition)
    };
    let idle = |task: i32, state: &'static str| weir_http::GroupTask {
        task,
        stage: stage_partition(task).0,
        partition: stage_partition(task).1,
        state,
        restored_from: None,
        watermark: None,
        time_lag_ms: None,
        lag_records: None,
        rows_read: 0,
        checkpoints_completed: 0,
    };
    let mut parts = Vec::new();
    let tasks = (slots.iter_mut())
        .map(|(&t, slot)| match slot {
            Slot::Running {
                restored,
                reporter,
                started,
                ..
            } => {
                let snap = reporter.sample(*started);
                let splits: Vec<&weir_runtime::metrics::SplitSnapshot> =
                    snap.nodes.iter().flat_map(|n| &n.splits).collect();
                let time_lag = splits.iter().filter_map(|s| s.time_lag_ms).max();
                let lag: Option<u64> = splits.iter().map(|s| s.lag_records).sum();
                let (stage, partition) = plan.stage_of_task(t);
                let task = weir_http::GroupTask {
                    task: t,
                    stage: stage.number,
                    partition,
                    state: "running",
                    restored_from: *restored,
                    watermark: snap.sources_watermark(),
                    time_lag_ms: time_lag,
                    lag_records: lag,
                    rows_read: splits.iter().map(|s| s.rows_read).sum(),
                    checkpoints_completed: snap.checkpoints.completed,
                };
                parts.push(weir_runtime::metrics::Part {
                    subtask: partition as usize,
                    snapshot: snap,
                    nodes: stage.origin.clone(),
                });
                task
            }
            Slot::Waiting { .. } => idle(t, "waiting"),
            Slot::Finished => idle(t, "finished"),
        })
        .collect();
    let info = weir_http::GroupInfo {
        group: plan.name.clone(),
        member: me.to_string(),
        members: members.to_vec(),
        http,
        assignment,
        tasks,
    };
    (info, parts)
}

/// One look at the group: tasks ended, the members alive, which tasks are this member's now;
/// hands back the tasks that are no longer its own and starts those that are.
async fn look(
    plan: &Plan,
    roster: &Roster,
    members: &mut Vec<String>,
    slots: &mut BTreeMap<i32, Slot>,
) -> Result<()> {
    check_ended(plan, slots).await?;
    roster.check_held()?;
    let live = match roster.live() {
        Ok(live) => live,
        // A shared folder out of reach for a moment: the members as last seen.
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "cannot read the group's members");
            if members.is_empty() {
                vec![roster.me.clone()]
            } else {
                members.clone()
            }
        }
    };
    if live != *members {
        eprintln!("weir: group {}: members {}", plan.name, live.join(", "));
        *members = live;
    }
    roster.watch_suspects(plan.tasks, members);
    let me = (members.iter().position(|m| *m == roster.me))
        .context("this member is missing from its own group")?;
    let owners = assign(plan.tasks, members);
    let mine: Vec<i32> = (0..plan.tasks)
        .filter(|&t| owners[t] == me)
        .map(|t| t as i32)
        .collect();
    let gone: Vec<i32> = (slots.keys().copied())
        .filter(|t| !mine.contains(t))
        .collect();
    let gone: Vec<(i32, Slot)> = (gone.into_iter())
        .filter_map(|t| slots.remove(&t).map(|s| (t, s)))
        .collect();
    stop_slots(plan, gone, true).await;
    for t in mine {
        slots.entry(t).or_insert(Slot::Waiting {
            at: now_ms(),
            said: false,
            restarts: 0,
        });
    }
    start_due(plan, slots)
}

/// Stops a task and waits until it has (its checkpoint folder released).
async fn stop_slot(task: &str, slot: Slot) {
    let Slot::Running {
        stop,
        savepoints,
        mut handle,
        ..
    } = slot
    else {
        return;
    };
    // With a savepoint, as a job run alone stops on SIGTERM, and the next owner goes on from
    // it: an exactly-once sink writes nothing twice, and an at-least-once sink repeats at most
    // the rows read between the savepoint and the stop (well under a second), where a task
    // moved after a kill repeats everything since its last checkpoint. Savepoint and stop
    // within HAND_BACK (a stalled sink must not hold the member): else it stops at once, from
    // its last checkpoint, and is aborted if even that hangs.
    let orderly = tokio::time::timeout(HAND_BACK, async {
        let saved = match savepoints.take(true).await {
            Ok(path) => Some(path),
            Err(e) => {
                eprintln!("weir: {task}: no savepoint ({e}); it stops at its last checkpoint");
                stop.stop();
                None
            }
        };
        (saved, (&mut handle).await)
    })
    .await;
    let (saved, ended) = match orderly {
        Ok((saved, ended)) => (saved, Some(ended)),
        Err(_) => {
            eprintln!(
                "weir: {task}: not stopped with a savepoint within {} s; it stops at its \
                 last checkpoint",
                HAND_BACK.as_secs()
            );
            stop.stop();
            match tokio::time::timeout(HAND_BACK, &mut handle).await {
                Ok(ended) => (None, Some(ended)),
                Err(_) => {
                    eprintln!("weir: {task}: did not stop; aborted");
                    handle.abort();
                    let _ = handle.await;
                    (None, None)
                }
            }
        }
    };
    match ended {
        Some(Ok(Ok(_))) => {
            if let Some(path) = saved {
                eprintln!(
                    "weir: {task}: stopped with a savepoint ({})",
                    path.display()
                );
                let _ = tokio::task::spawn_blocking(move || prune_savepoints(&path)).await;
            }
        }
        Some(Ok(Err(e))) => eprintln!("weir: {task}: failed while stopping: {e:#}"),
        Some(Err(e)) => eprintln!("weir: {task}: {e}"),
        None => {}
    }
}

/// Stops `slots` all at once (each as [`stop_slot`]), saying which were handed back.
async fn stop_slots(plan: &Plan, slots: Vec<(i32, Slot)>, handed_back: bool) {
    let mut stopping = tokio::task::JoinSet::new();
    for (t, slot) in slots {
        let task = plan.describe(t);
        stopping.spawn(async move {
            stop_slot(&task, slot).await;
            task
        });
    }
    while let Some(done) = stopping.join_next().await {
        if let (Ok(task), true) = (done, handed_back) {
            eprintln!("weir: {task}: handed back to the group");
        }
    }
}

/// How long a task handed back may take to write its savepoint and stop.
const HAND_BACK: Duration = Duration::from_secs(30);

/// Removes the savepoints older than `newest` (a task's, just written as it stopped): a task
/// takes one at every hand-back, and the next owner goes on from the newest, so the older ones
/// serve nothing (a savepoint holds its files itself, so removing one takes nothing from
/// another).
fn prune_savepoints(newest: &Path) {
    let epoch =
        |p: &Path| -> Option<u64> { p.file_name()?.to_str()?.strip_prefix("chk-")?.parse().ok() };
    // `<task>/savepoints/chk-<epoch>`, in a folder or object storage.
    let (Some(task), Some(keep)) = (newest.parent().and_then(Path::parent), epoch(newest)) else {
        return;
    };
    let removed = weir_state::checkpoint::storage_at(task)
        .and_then(|s| s.remove_savepoints_before(weir_core::time::Epoch(keep)));
    if let Err(err) = removed {
        tracing::warn!(task = %task.display(), error = %err, "cannot remove old savepoints");
    }
}

/// Looks at the running tasks that have ended: a failure that a restart may mend restarts the
/// task from its newest checkpoint as the job's restart strategy says; any other ends the
/// member with its error.
async fn check_ended(plan: &Plan, slots: &mut BTreeMap<i32, Slot>) -> Result<()> {
    let ended: Vec<i32> = (slots.iter())
        .filter(|(_, s)| matches!(s, Slot::Running { handle, .. } if handle.is_finished()))
        .map(|(p, _)| *p)
        .collect();
    for p in ended {
        let Some(Slot::Running {
            handle,
            restarts,
            mut reporter,
            started,
            ..
        }) = slots.remove(&p)
        else {
            continue;
        };
        // A task that completed a checkpoint since it last started ran well: its failures
        // are counted afresh, so a long-lived member does not use up the strategy's attempts.
        let restarts = if reporter.sample(started).checkpoints.completed > 0 {
            0
        } else {
            restarts
        };
        match handle.await? {
            Ok(report) => {
                eprintln!(
                    "weir: {}: {} after {} ms",
                    plan.describe(p),
                    if report.stopped {
                        "stopped"
                    } else {
                        "finished"
                    },
                    report.elapsed_ms
                );
                slots.insert(p, Slot::Finished);
            }
            Err(e) if e.may_pass_on_restart() => {
                let n = restarts + 1;
                let strategy = (plan.graph.config.checkpointing.as_ref()).map(|c| c.restart);
                let Some(delay) = strategy.and_then(|s| s.delay_before(n)) else {
                    return Err(anyhow::Error::new(e).context(format!(
                        "{} failed, after {restarts} restarts here, which is all the \
                         job's restart strategy allows",
                        plan.describe(p)
                    )));
                };
                eprintln!(
                    "weir: {}: failed: {e:#}; restart {n} from its newest checkpoint in \
                     {} ms",
                    plan.describe(p),
                    delay.as_millis()
                );
                slots.insert(
                    p,
                    Slot::Waiting {
                        at: now_ms() + delay.as_millis() as u64,
                        said: false,
                        restarts: n,
                    },
                );
            }
            Err(e) => return Err(anyhow::Error::new(e).context(plan.describe(p))),
        }
    }
    Ok(())
}

/// Starts the tasks whose time has come. A task whose checkpoint folder is still held (its
/// previous owner stopping, or a lease not yet run out) waits and tries again.
fn start_due(plan: &Plan, slots: &mut BTreeMap<i32, Slot>) -> Result<()> {
    let now = now_ms();
    for (&p, slot) in slots.iter_mut() {
        let Slot::Waiting { at, said, restarts } = slot else {
            continue;
        };
        if *at > now {
            continue;
        }
        let graph = plan.task_graph(p)?;
        match exec::start(graph, Arc::new(SystemClock)) {
            Ok(job) => {
                match job.restored() {
                    Some((epoch, path, _)) => eprintln!(
                        "weir: {}: took over from {} {epoch} ({})",
                        plan.describe(p),
                        if path.parent().is_some_and(|d| d.ends_with("savepoints")) {
                            "savepoint"
                        } else {
                            "checkpoint"
                        },
                        path.display()
                    ),
                    None => eprintln!(
                        "weir: {}: started from the beginning (no checkpoint in {})",
                        plan.describe(p),
                        plan.task_dir(p)
                    ),
                }
                let stop = job.stop_handle();
                let savepoints = job.savepoint_handle();
                let restored = job.restored().map(|r| r.0);
                let reporter = job.reporter();
                let started = job.started;
                let handle = tokio::spawn(job.wait());
                *slot = Slot::Running {
                    stop,
                    handle,
                    restored,
                    reporter,
                    started,
                    restarts: *restarts,
                    savepoints,
                };
            }
            Err(weir_runtime::Error::State(weir_state::Error::InUse { holder, .. })) => {
                if !*said {
                    eprintln!(
                        "weir: {}: waiting for {} (held by {holder})",
                        plan.describe(p),
                        plan.task_dir(p)
                    );
                    *said = true;
                }
                *at = now + 200;
            }
            Err(e) if e.may_pass_on_restart() => {
                eprintln!(
                    "weir: {}: cannot start: {e:#}; trying again in a second",
                    plan.describe(p)
                );
                *at = now + 1_000;
            }
            Err(e) => return Err(anyhow::Error::new(e).context(plan.describe(p))),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("host-{}-{}", 100 + i, 7 * i))
            .collect()
    }

    #[test]
    fn every_task_has_one_member_and_the_load_is_even() {
        for members in 1..=7 {
            for tasks in [1, 6, 12, 13] {
                let owners = assign(tasks, &names(members));
                let share = tasks.div_ceil(members);
                for m in 0..members {
                    let load = owners.iter().filter(|&&o| o == m).count();
                    assert!(
                        load <= share,
                        "{members} members, {tasks} tasks: {owners:?}"
                    );
                }
                // The same members in any order give the same owners by name.
                let mut reversed = names(members);
                reversed.reverse();
                let again = assign(tasks, &reversed);
                for t in 0..tasks {
                    assert_eq!(names(members)[owners[t]], reversed[again[t]]);
                }
            }
        }
    }

    #[test]
    fn a_member_leaving_moves_its_own_tasks_and_few_others() {
        let all = names(4);
        let before = assign(24, &all);
        for gone in 0..4 {
            let rest: Vec<String> = (all.iter())
                .enumerate()
                .filter(|(i, _)| *i != gone)
                .map(|(_, m)| m.clone())
                .collect();
            let after = assign(24, &rest);
            let moved = (0..24)
                .filter(|&t| before[t] != gone && all[before[t]] != rest[after[t]])
                .count();
            // Its 6 tasks move; with the even share a few more may follow, never most.
            assert!(
                moved <= 6,
                "member {gone} left and {moved} other tasks moved"
            );
        }
    }

    #[test]
    fn only_savepoints_older_than_the_newest_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let sp = dir.path().join("task-2/savepoints");
        for n in ["chk-3", "chk-5", "chk-7", "chk-9", "notes"] {
            std::fs::create_dir_all(sp.join(n)).unwrap();
        }
        // A complete savepoint, and one cut short (no manifest): both older, both removed.
        std::fs::write(sp.join("chk-3/_manifest.json"), "{}").unwrap();
        prune_savepoints(&sp.join("chk-7"));
        let mut left: Vec<String> = std::fs::read_dir(&sp)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        // Newer ones (another owner's, written since) and what is no savepoint stay.
        assert_eq!(left, ["chk-7", "chk-9", "notes"]);
    }

    #[test]
    fn a_topic_that_gained_partitions_stops_the_member_saying_what_a_restart_skips() {
        let plan = Plan {
            name: "g".into(),
            topic: "orders".into(),
            tasks: 6,
            graph: JobGraph {
                name: "job".into(),
                config: Default::default(),
                nodes: Vec::new(),
                edges: Vec::new(),
            },
            stages: Vec::new(),
            repartition: Vec::new(),
            repartition_retention_ms: 0,
        };
        let log = |partitions| {
            Ok(Some(weir_runtime::LogPartitions {
                topic: "orders".into(),
                partitions,
                client: Default::default(),
            }))
        };
        assert!(partitions_unchanged(&plan, vec![(6, log(6)), (4, log(4))]).is_ok());
        let e = partitions_unchanged(&plan, vec![(6, log(6)), (6, log(8))]).unwrap_err();
        let e = format!("{e:#}");
        assert!(e.contains("topic orders has 8 partitions now"), "{e}");
        assert!(e.contains("reads it with 6 tasks"), "{e}");
        assert!(e.contains("'latest-offset' or a timestamp"), "{e}");
        // Brokers out of reach for a moment stop nothing.
        let unreachable = Err(weir_runtime::Error::plan("no brokers"));
        assert!(partitions_unchanged(&plan, vec![(6, unreachable)]).is_ok());
    }

    #[test]
    fn a_task_file_carries_its_number_before_the_extension() {
        assert_eq!(
            task_path(Path::new("out/dl.jsonl"), 3),
            PathBuf::from("out/dl.task-3.jsonl")
        );
        assert_eq!(
            task_path(Path::new("dead"), 0),
            PathBuf::from("dead.task-0")
        );
    }
}
