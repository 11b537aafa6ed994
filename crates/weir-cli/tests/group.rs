//! A job run as a group of processes over Kafka (`weir run --group`): tasks per partition,
//! shared by the members alive, moved with their checkpoints when a member dies.
//!
//! Needs the broker and the PostgreSQL server `scripts/test` starts (`WEIR_KAFKA_BOOTSTRAP`,
//! `WEIR_POSTGRES_URL`).

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use weir_core::time::Stopwatch;
use weir_core::SystemClock;

use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use weir_testkit::{kafka, postgres};

/// How many records the tests write, six partitions' worth.
const RECORDS: i64 = 24_000;

/// A stateless job over `topic` into `schema.big` (bounded: read to the topic's end at start).
fn job(topic: &str, schema: &str, bounded: bool) -> String {
    let bs = kafka::bootstrap();
    let url = postgres::url();
    let bounded = if bounded {
        ", 'scan.bounded.mode' = 'latest-offset'"
    } else {
        ""
    };
    format!(
        "
SET 'execution.checkpointing.interval' = '300 ms';
SET 'execution.checkpointing.dir' = 'checkpoints';
CREATE TABLE events (id BIGINT, user_id BIGINT, amount BIGINT, ts BIGINT,
  rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
) WITH ('connector' = 'kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{bs}',
        'properties.group.id' = '{topic}-offsets', 'scan.startup.mode' = 'earliest-offset',
        'format' = 'json'{bounded});
CREATE TABLE big (id BIGINT, user_id BIGINT, doubled BIGINT, rt TIMESTAMP(3))
WITH ('connector' = 'jdbc', 'url' = '{url}', 'table-name' = '{schema}.big',
      'sink.buffer-flush.max-rows' = '500');
INSERT INTO big SELECT id, user_id, amount * 2, CAST(rt AS TIMESTAMP(3)) FROM events
WHERE amount > 500;
"
    )
}

/// Writes records `from..to` of the test's data into `topic` (record i into partition i mod 6),
/// `per_second` of them a second (0: at once).
fn produce(topic: &str, from: i64, to: i64, per_second: i64) {
    let records = (from..to).map(|i| {
        let value = format!(
            r#"{{"id":{i},"user_id":{},"amount":{},"ts":{}}}"#,
            i % 97,
            (i * 7919) % 1000,
            1_700_000_000_000 + i * 10
        );
        (topic.to_string(), (i % 6) as i32, value)
    });
    produce_records(records, per_second);
}

/// Writes `(topic, partition, value)` records in their order, `per_second` of them a second
/// (0: at once).
fn produce_records(records: impl Iterator<Item = (String, i32, String)>, per_second: i64) {
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka::bootstrap())
        .set("enable.idempotence", "true")
        .create()
        .unwrap();
    let started = Stopwatch::start(&SystemClock);
    for (i, (topic, partition, value)) in records.enumerate() {
        let i = i as i64;
        let mut record: BaseRecord<'_, (), String> =
            BaseRecord::to(&topic).payload(&value).partition(partition);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, r)) => {
                    producer.poll(Duration::from_millis(10));
                    record = r;
                }
            }
        }
        if per_second > 0 && i % 200 == 0 {
            producer.poll(Duration::ZERO);
            let due = Duration::from_millis((i * 1000 / per_second) as u64);
            let elapsed = Duration::from_nanos(started.elapsed_nanos(&SystemClock));
            if let Some(wait) = due.checked_sub(elapsed) {
                std::thread::sleep(wait);
            }
        }
    }
    producer.flush(Duration::from_secs(60)).unwrap();
}

/// The rows of `schema.big`, sorted, as text.
fn rows(rt: &tokio::runtime::Runtime, schema: &str) -> Vec<String> {
    rt.block_on(async {
        let client = postgres::connect(&postgres::url()).await;
        let q = format!("SELECT id, user_id, doubled, rt::text FROM {schema}.big");
        let mut out: Vec<String> = match client.query(&q, &[]).await {
            Ok(rows) => rows
                .iter()
                .map(|r| {
                    format!(
                        "{},{},{},{}",
                        r.get::<_, i64>(0),
                        r.get::<_, i64>(1),
                        r.get::<_, i64>(2),
                        r.get::<_, String>(3)
                    )
                })
                .collect(),
            // Not created yet.
            Err(_) => Vec::new(),
        };
        out.sort();
        out
    })
}

/// One member of group `group`, its stderr into `log` in `dir`, serving HTTP on `http` (an
/// address or `off`).
fn member(dir: &Path, group: &str, log: &str, http: &str) -> Child {
    let file = std::fs::File::create(dir.join(log)).unwrap();
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", "job.sql", "--group", group, "--http", http])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .unwrap()
}

/// The members a test started, killed when the test ends however it ends: a failed test
/// leaves no member running on.
struct Members(Vec<Child>);

impl std::ops::Deref for Members {
    type Target = Vec<Child>;
    fn deref(&self) -> &Vec<Child> {
        &self.0
    }
}

impl std::ops::DerefMut for Members {
    fn deref_mut(&mut self) -> &mut Vec<Child> {
        &mut self.0
    }
}

impl Drop for Members {
    fn drop(&mut self) {
        for m in &mut self.0 {
            let _ = m.kill();
            let _ = m.wait();
        }
    }
}

/// `GET path` from the server at `addr`, its body as JSON (`Null` when it is none).
fn http_get(addr: &str, path: &str) -> serde_json::Value {
    serde_json::from_str(&http_text(addr, path)).unwrap_or(serde_json::Value::Null)
}

/// `GET path` from the server at `addr`, its body (empty when there is none).
fn http_text(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return String::new();
    };
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_string())
}

/// The address of the web API a member's log says it serves.
fn web_address(log: &str) -> String {
    common::served_address(log).unwrap_or_else(|| panic!("no address in the log:\n{log}"))
}

fn log(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_default()
}

/// The logs `names` in `dir`.
fn logs<const N: usize>(dir: &Path, names: &[&str; N]) -> [String; N] {
    names.map(|l| log(dir, l))
}

/// What members b and c (`logs[1]` and `logs[2]`) logged from the kill of member a on, when
/// their logs were `before_kill` bytes long.
fn after_kill(logs: &[String], before_kill: [usize; 2]) -> String {
    format!(
        "{}{}",
        &logs[1][before_kill[0]..],
        &logs[2][before_kill[1]..]
    )
}

/// Asks member `m` to leave (SIGTERM: it stops its tasks with savepoints).
fn sigterm(m: &Child) {
    let pid = m.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
}

/// Two fresh PostgreSQL schemas, for a single run's output and a group's.
fn schemas(rt: &tokio::runtime::Runtime, reference: &str, group: &str) -> (String, String) {
    rt.block_on(async {
        (
            postgres::fresh_schema(reference).await.name,
            postgres::fresh_schema(group).await.name,
        )
    })
}

/// The tasks a member's log says it runs now: started or taken over, and not handed back since.
fn tasks_held(log: &str) -> Vec<i32> {
    let mut held = std::collections::BTreeSet::new();
    for line in log.lines() {
        let Some(rest) = line.strip_prefix("weir: task ") else {
            continue;
        };
        let Some((n, what)) = rest.split_once(": ") else {
            continue;
        };
        // `task 7` or, in a job of several stages, `task 7 (stage 1, partition 1)`.
        let Ok(n) = n.split(' ').next().unwrap_or_default().parse::<i32>() else {
            continue;
        };
        if what.starts_with("started") || what.starts_with("took over") {
            held.insert(n);
        } else if what.starts_with("handed back") {
            held.remove(&n);
        }
    }
    held.into_iter().collect()
}

/// Whether the checkpoint a member taking task `task` over goes on from (the newest good one
/// under `dir`'s `checkpoints`, as a restore of `latest` takes it) is a checkpoint rather than
/// a savepoint: a task handed to a member with a savepoint is taken over "from checkpoint"
/// after that member is killed only once the member has checkpointed it.
fn newest_is_a_checkpoint(dir: &Path, task: i32) -> bool {
    let folder = dir.join("checkpoints").join(format!("task-{task}"));
    weir_state::checkpoint::storage_at(&folder)
        .and_then(|s| s.latest_good())
        .is_ok_and(|good| good.is_some_and(|g| !g.handle.savepoint))
}

/// Waits up to three minutes for `done`, checking every 100 ms; panics naming `what`, with the
/// members' logs in `dir`.
fn wait_for(dir: &Path, what: &str, mut done: impl FnMut() -> bool) {
    let started = Stopwatch::start(&SystemClock);
    while !done() {
        if started.elapsed_nanos(&SystemClock) > 180_000_000_000 {
            let logs: Vec<String> = ["a.log", "b.log", "c.log", "d.log"]
                .iter()
                .map(|l| format!("{l}:\n{}", log(dir, l)))
                .collect();
            panic!("gave up waiting for {what}; logs:\n{}", logs.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
#[ignore = "needs the broker and PostgreSQL: run with scripts/test"]
fn three_members_one_killed_and_one_started_later_write_a_single_run_s_rows_exactly_once() {
    let rt = kafka::rt();
    let topic = kafka::topic(&rt, "group-events", 6);
    let (reference, grouped) = schemas(&rt, "group_reference", "group_members");

    // The group, while the records are written at 3,000 a second.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("job.sql"), job(&topic, &grouped, false)).unwrap();
    let group = format!("{topic}-group");
    let mut members = Members(vec![
        member(dir.path(), &group, "a.log", "off"),
        member(dir.path(), &group, "b.log", "127.0.0.1:0"),
        member(dir.path(), &group, "c.log", "127.0.0.1:0"),
    ]);
    let producer = {
        let topic = topic.clone();
        std::thread::spawn(move || produce(&topic, 0, RECORDS, 3_000))
    };
    // Member a is killed mid-stream, once every member runs tasks (so none moves until the
    // kill), each of a's checkpointed since a took it, and the sink has some rows.
    wait_for(
        dir.path(),
        "every member to run tasks, a's checkpointed, and rows to arrive",
        || {
            let held = logs(dir.path(), &["a.log", "b.log", "c.log"]).map(|l| tasks_held(&l));
            held.iter().all(|h| !h.is_empty())
                && (held[0].iter()).all(|&t| newest_is_a_checkpoint(dir.path(), t))
                && rows(&rt, &grouped).len() > 1_000
        },
    );
    // What the survivors logged before the kill (a hand-back, a start) does not count.
    let before_kill = logs(dir.path(), &["b.log", "c.log"]).map(|l| l.len());
    members[0].kill().unwrap();
    members[0].wait().unwrap();
    let a_held = tasks_held(&log(dir.path(), "a.log"));
    // Its tasks move to b and c once the group has given up on it.
    wait_for(dir.path(), "a's tasks to be taken over", || {
        let mut held = tasks_held(&log(dir.path(), "b.log"));
        held.extend(tasks_held(&log(dir.path(), "c.log")));
        a_held.iter().all(|t| held.contains(t))
    });
    members.push(member(dir.path(), &group, "d.log", "127.0.0.1:0"));
    producer.join().unwrap();

    // The reference: one process reading the whole topic, bounded.
    let single = tempfile::tempdir().unwrap();
    std::fs::write(single.path().join("job.sql"), job(&topic, &reference, true)).unwrap();
    let (code, out) = common::weir_out(single.path(), &["run", "job.sql"]);
    assert_eq!(code, 0, "{out}");
    let want = rows(&rt, &reference);
    assert!(want.len() > 10_000, "{} rows", want.len());

    wait_for(
        dir.path(),
        "the group's sink to hold as many rows as the single run's",
        || rows(&rt, &grouped).len() >= want.len(),
    );
    // The three members alive share the six tasks evenly, each task run by one.
    wait_for(dir.path(), "b, c and d to run two tasks each", || {
        let held: Vec<Vec<i32>> = ["b.log", "c.log", "d.log"]
            .iter()
            .map(|l| tasks_held(&log(dir.path(), l)))
            .collect();
        let mut all: Vec<i32> = held.concat();
        all.sort();
        held.iter().all(|h| h.len() == 2) && all == [0, 1, 2, 3, 4, 5]
    });
    // Member d's HTTP API lists the members, who runs which task, and d's tasks' progress.
    let d_log = log(dir.path(), "d.log");
    let addr = web_address(&d_log);
    let mut group_api = serde_json::Value::Null;
    wait_for(
        dir.path(),
        "d's /api/v1/group to show its two tasks running",
        || {
            group_api = http_get(&addr, "/api/v1/group");
            let tasks = group_api["tasks"].as_array().cloned().unwrap_or_default();
            tasks.len() == 2
                && (tasks.iter()).all(|t| t["state"] == "running" && t["watermark"].is_i64())
        },
    );
    let members_api: Vec<&str> = (group_api["members"].as_array().unwrap().iter())
        .map(|m| m.as_str().unwrap())
        .collect();
    assert_eq!(members_api.len(), 3, "{group_api:#}");
    assert!(members_api.contains(&group_api["member"].as_str().unwrap()));
    let mut assigned: Vec<i64> = (group_api["assignment"].as_object().unwrap().values())
        .flat_map(|ts| ts.as_array().unwrap().iter().map(|t| t.as_i64().unwrap()))
        .collect();
    assigned.sort();
    assert_eq!(assigned, [0, 1, 2, 3, 4, 5], "{group_api:#}");
    let d_tasks: Vec<i64> = (group_api["tasks"].as_array().unwrap().iter())
        .map(|t| t["task"].as_i64().unwrap())
        .collect();
    let d_held: Vec<i64> = tasks_held(&d_log).iter().map(|&t| i64::from(t)).collect();
    assert_eq!(d_tasks, d_held, "{group_api:#}");
    assert_eq!(
        group_api["assignment"][group_api["member"].as_str().unwrap()],
        serde_json::json!(d_held)
    );
    // Its Prometheus metrics say the same.
    let metrics = http_text(&addr, "/metrics");
    assert!(
        metrics.contains(&format!(
            "weir_group_members{{job=\"job\",group=\"{group}\"}} 3\n"
        )),
        "{metrics}"
    );
    for t in &d_held {
        assert!(
            metrics.contains(&format!(
                "weir_group_task_state{{job=\"job\",group=\"{group}\",task=\"{t}\",state=\"running\"}} 1\n"
            )),
            "{metrics}"
        );
    }
    // The job's operators as d runs them: a subtask per task, numbered by the partition its
    // task reads, rows flowing into the sink; the job's own Prometheus families too.
    let mut job_metrics = serde_json::Value::Null;
    let subtasks = |n: &serde_json::Value| -> Vec<i64> {
        (n["subtasks"].as_array().into_iter().flatten())
            .map(|s| s["subtask"].as_i64().unwrap())
            .collect()
    };
    wait_for(dir.path(), "d's /api/v1/metrics to show its tasks", || {
        job_metrics = http_get(&addr, "/api/v1/metrics");
        let nodes = job_metrics["nodes"].as_array().cloned().unwrap_or_default();
        !nodes.is_empty()
            && nodes.iter().all(|n| subtasks(n) == d_held)
            && (nodes.iter()).any(|n| {
                n["kind"].as_str().unwrap_or_default().starts_with("sink")
                    && n["rows_in"].as_u64() > Some(0)
            })
    });
    let splits: Vec<String> = (job_metrics["nodes"][0]["splits"].as_array().unwrap().iter())
        .map(|s| s["split"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(splits.len(), 2, "{job_metrics:#}");
    let metrics = http_text(&addr, "/metrics");
    assert!(
        metrics.contains("# TYPE weir_operator_rows_in_total counter"),
        "{metrics}"
    );
    // `weir top --group` shows every member and every task, from each member's API.
    let mut top = String::new();
    wait_for(
        dir.path(),
        "weir top --group to show six tasks running",
        || {
            let (code, out) =
                common::weir_out(dir.path(), &["top", "--group", "--http", &addr, "--once"]);
            top = out;
            // Each member named with its address and its two tasks.
            code == 0
                && (0..6).all(|t| top.contains(&format!("\n{t:>4}  running ")))
                && members_api.iter().all(|m| top.matches(m).count() == 3)
        },
    );
    assert!(top.contains(&format!("group {group}: 3 members")), "{top}");
    println!("weir top --group:\n{top}");
    // The job run alone in the group's folder is refused while the group runs.
    let (code, out) = common::weir_out(dir.path(), &["run", "job.sql", "--http", "off"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("it holds a group's checkpoints"), "{out}");
    // Stopped, then the table read: a row committed late, a duplicate among them, counts.
    for m in &mut members[1..] {
        sigterm(m);
    }
    for m in &mut members[1..] {
        assert!(m.wait().unwrap().success());
    }
    let got = rows(&rt, &grouped);
    let logs = logs(dir.path(), &["a.log", "b.log", "c.log", "d.log"]);
    assert_eq!(got.len(), want.len(), "logs:\n{}", logs.join("\n----\n"));
    assert!(got == want, "the group's rows differ from the single run's");
    // The members said which tasks they took over from a checkpoint.
    let survivors = after_kill(&logs, before_kill);
    for t in &a_held {
        assert!(
            survivors.contains(&format!("weir: task {t}: took over from checkpoint")),
            "task {t} of the killed member, in the others' logs:\n{survivors}"
        );
    }
    for l in &logs[1..] {
        assert!(l.contains("left (exit 0)"), "{l}");
    }
    // The tasks d took were handed back by b and c with a savepoint, and d went on from it.
    let d_took: Vec<&str> = (logs[3].lines())
        .filter(|l| l.contains(": took over from"))
        .collect();
    assert!(!d_took.is_empty(), "{}", logs[3]);
    for l in &d_took {
        assert!(l.contains("took over from savepoint"), "{}", logs[3]);
    }
    // Every task was stopped with a savepoint at the end, and only the newest is kept.
    for t in 0..6 {
        let saved = std::fs::read_dir(dir.path().join(format!("checkpoints/task-{t}/savepoints")))
            .map(|d| d.count())
            .unwrap_or(0);
        assert_eq!(saved, 1, "task {t}'s savepoints");
    }
    println!("the members' logs:\n{}", logs.join("\n----\n"));
}

#[test]
#[ignore = "needs the broker: run with scripts/test"]
fn a_group_refuses_what_its_tasks_cannot_do_alone() {
    let rt = kafka::rt();
    let six = kafka::topic(&rt, "group-six", 6);
    let four = kafka::topic(&rt, "group-four", 4);
    let bs = kafka::bootstrap();
    let dir = tempfile::tempdir().unwrap();
    let table = |name: &str, topic: &str| {
        format!(
            "CREATE TABLE {name} (k BIGINT, ts BIGINT, rt AS TO_TIMESTAMP_LTZ(ts, 3),
               WATERMARK FOR rt AS rt - INTERVAL '1' SECOND)
             WITH ('connector' = 'kafka', 'topic' = '{topic}',
                   'properties.bootstrap.servers' = '{bs}', 'format' = 'json');"
        )
    };
    let refused = |sql: String, args: &[&str], want: &[&str]| {
        std::fs::write(dir.path().join("job.sql"), sql).unwrap();
        let mut all = vec!["run", "job.sql", "--group", "g"];
        all.extend_from_slice(args);
        let (code, out) = common::weir_out(dir.path(), &all);
        assert_eq!(code, 1, "{out}");
        for w in want {
            assert!(out.contains(w), "`{w}` not in:\n{out}");
        }
    };
    let checkpoints = "SET 'execution.checkpointing.interval' = '1 s';";
    // Keyed state fed by rows not re-keyed for it: the partial phase of a two-phase
    // aggregation, and salting, which spreads a key's rows over several tasks.
    refused(
        format!(
            "{checkpoints}{}
             SET 'table.optimizer.agg-phase-strategy' = 'TWO_PHASE';
             CREATE TABLE out (k BIGINT, n BIGINT) WITH ('connector' = 'print');
             INSERT INTO out SELECT k, COUNT(*) FROM a
             GROUP BY k, TUMBLE(rt, INTERVAL '1' MINUTE);",
            table("a", &six)
        ),
        &[],
        &["keeps state and is not fed by rows re-keyed for it"],
    );
    refused(
        format!(
            "{checkpoints}{}
             SET 'weir.aggregation.salts' = '2';
             CREATE TABLE out (k BIGINT, n BIGINT) WITH ('connector' = 'print');
             INSERT INTO out SELECT k, COUNT(*) FROM a
             GROUP BY k, TUMBLE(rt, INTERVAL '1' MINUTE);",
            table("a", &six)
        ),
        &[],
        &["is partitioned by salted(k)", "not broadcast or salted"],
    );
    // A source that is no topic, and a bounded read.
    std::fs::write(dir.path().join("in.csv"), "1,2\n").unwrap();
    refused(
        format!(
            "{checkpoints}
             CREATE TABLE f (k BIGINT, ts BIGINT) WITH ('connector' = 'filesystem',
               'path' = 'in.csv', 'format' = 'csv');
             CREATE TABLE out (k BIGINT) WITH ('connector' = 'print');
             INSERT INTO out SELECT k FROM f;"
        ),
        &[],
        &["source `f` (file) is no Kafka topic"],
    );
    refused(
        format!(
            "{checkpoints}
             CREATE TABLE b (k BIGINT, ts BIGINT) WITH ('connector' = 'kafka', 'topic' = '{six}',
               'properties.bootstrap.servers' = '{bs}', 'format' = 'json',
               'scan.bounded.mode' = 'latest-offset');
             CREATE TABLE out (k BIGINT) WITH ('connector' = 'print');
             INSERT INTO out SELECT k FROM b;"
        ),
        &[],
        &["source `b` is bounded"],
    );
    // A folder holding checkpoints of the job run alone.
    std::fs::create_dir_all(dir.path().join("alone/chk-3")).unwrap();
    refused(
        format!(
            "{checkpoints}SET 'execution.checkpointing.dir' = 'alone';{}
             CREATE TABLE out (k BIGINT) WITH ('connector' = 'print');
             INSERT INTO out SELECT k FROM a;",
            table("a", &six)
        ),
        &[],
        &["holds checkpoints of the job run alone (chk-3)"],
    );
    // Topics of different partition counts.
    refused(
        format!(
            "{checkpoints}{}{}
             CREATE TABLE out (k BIGINT) WITH ('connector' = 'print');
             INSERT INTO out SELECT k FROM a UNION ALL SELECT k FROM b;",
            table("a", &six),
            table("b", &four)
        ),
        &[],
        &["of 4 partitions", "has 6", "co-partitioned"],
    );
    // No checkpoints: a task could not move.
    refused(
        format!(
            "{}
             CREATE TABLE out (k BIGINT) WITH ('connector' = 'print');
             INSERT INTO out SELECT k FROM a;",
            table("a", &six)
        ),
        &[],
        &[
            "--checkpoint-interval",
            "every process of the group reaches",
        ],
    );
    // A file sink, which every task would write.
    refused(
        format!(
            "{checkpoints}{}
             CREATE TABLE out (k BIGINT) WITH ('connector' = 'filesystem', 'path' = 'out.csv',
               'format' = 'csv');
             INSERT INTO out SELECT k FROM a;",
            table("a", &six)
        ),
        &[],
        &["writes the file", "every task of the group"],
    );
    // Parallelism: the tasks are the parallelism.
    refused(
        format!(
            "{checkpoints}{}
             CREATE TABLE out (k BIGINT) WITH ('connector' = 'print');
             INSERT INTO out SELECT k FROM a;",
            table("a", &six)
        ),
        &["--parallelism", "2"],
        &["parallelism 2", "more partitions"],
    );
}

/// The first event time of the re-keying tests' data.
const T0: i64 = 1_700_000_000_000;

/// Clicks (`user_id`, `ad_id`, event time `ts`) and, with `impressions`, the impressions they
/// follow, for records `0..n`: record i of user i mod 53, clicks into partition `user_id mod
/// 6` and impressions into partition `user_id mod 4` (their topic has 4), every 37th click 5 s
/// behind the others (later than the watermark's 2 s allow: late), then in every partition a
/// record an hour later, which closes every window before it.
fn clicks_and_impressions(
    clicks: &str,
    impressions: Option<&str>,
    n: i64,
) -> Vec<(String, i32, String)> {
    let mut out = Vec::new();
    for i in 0..n {
        let (user, ad, ts) = (i % 53, (i * 31) % 17, T0 + i * 20);
        let partition = (user % 6) as i32;
        if let Some(imp) = impressions {
            out.push((
                imp.to_string(),
                (user % 4) as i32,
                format!(r#"{{"id":{i},"user_id":{user},"ad_id":{ad},"ts":{ts}}}"#),
            ));
            if i % 3 != 0 {
                continue;
            }
        }
        // After its impression by up to 12 s (beyond 10 s: no match), or late.
        let late = if i % 37 == 0 { 5_000 } else { 0 };
        let cts = ts + (i * 7) % 12_000 * i64::from(impressions.is_some()) - late;
        out.push((
            clicks.to_string(),
            partition,
            format!(r#"{{"id":{i},"user_id":{user},"ad_id":{ad},"ts":{cts}}}"#),
        ));
    }
    let end = T0 + n * 20 + 3_600_000;
    for (t, partitions) in std::iter::once((clicks, 6)).chain(impressions.map(|i| (i, 4))) {
        for p in 0..partitions {
            out.push((
                t.to_string(),
                p,
                format!(r#"{{"id":-1,"user_id":{p},"ad_id":99,"ts":{end}}}"#),
            ));
        }
    }
    out
}

/// A Kafka table of clicks or impressions over `topic` (bounded: read to its end at start).
fn events_table(name: &str, topic: &str, bounded: bool) -> String {
    let bs = kafka::bootstrap();
    let bounded = if bounded {
        ", 'scan.bounded.mode' = 'latest-offset'"
    } else {
        ""
    };
    format!(
        "CREATE TABLE {name} (id BIGINT, user_id BIGINT, ad_id BIGINT, ts BIGINT,
           rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '2' SECOND)
         WITH ('connector' = 'kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{bs}',
               'scan.startup.mode' = 'earliest-offset', 'format' = 'json'{bounded});"
    )
}

/// The rows of `query`, sorted, each as its columns' text joined by commas.
fn query_rows(rt: &tokio::runtime::Runtime, query: &str) -> Vec<String> {
    rt.block_on(async {
        let client = postgres::connect(&postgres::url()).await;
        let q = format!("SELECT t::text FROM ({query}) t");
        let mut out: Vec<String> = match client.query(&q, &[]).await {
            Ok(rows) => rows.iter().map(|r| r.get::<_, String>(0)).collect(),
            // Not created yet.
            Err(_) => Vec::new(),
        };
        out.sort();
        out
    })
}

/// Runs `sql` alone, bounded, in a folder of its own; returns its output.
fn single_run(sql: String) -> String {
    let single = tempfile::tempdir().unwrap();
    std::fs::write(single.path().join("job.sql"), sql).unwrap();
    let (code, out) = common::weir_out(single.path(), &["run", "job.sql", "--http", "off"]);
    assert_eq!(code, 0, "{out}");
    out
}

/// The re-keying tests' job after `settings`: a count per ad over 10-second windows of the
/// clicks in `topic` (bounded: read to its end at start), into `schema.per_ad`.
fn count_per_ad(topic: &str, schema: &str, bounded: bool, settings: &str) -> String {
    let url = postgres::url();
    format!(
        "{settings}
         {}
         CREATE TABLE per_ad (ad_id BIGINT, window_start TIMESTAMP(3), clicks BIGINT)
         WITH ('connector' = 'jdbc', 'url' = '{url}', 'table-name' = '{schema}.per_ad');
         INSERT INTO per_ad SELECT ad_id, window_start, COUNT(*)
         FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(rt), INTERVAL '10' SECOND))
         GROUP BY ad_id, window_start, window_end;",
        events_table("clicks", topic, bounded)
    )
}

/// The windows of `schema.per_ad` before the records an hour later (which a group running on
/// never closes), sorted.
fn closed_windows(rt: &tokio::runtime::Runtime, schema: &str) -> Vec<String> {
    query_rows(
        rt,
        &format!(
            "SELECT ad_id, window_start, clicks FROM {schema}.per_ad
             WHERE window_start < to_timestamp({})::timestamp",
            (T0 + 3_000_000) / 1000
        ),
    )
}

/// Rows the operators of a job run alone set aside as late, from its summary.
fn set_aside(out: &str) -> u64 {
    (out.lines())
        .find_map(|l| l.trim().strip_prefix("late rows:"))
        .and_then(|l| l.split(", ").nth(1)?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no late rows in:\n{out}"))
}

#[test]
#[ignore = "needs the broker and PostgreSQL: run with scripts/test"]
fn a_count_per_ad_over_clicks_by_user_re_keyed_between_two_members_is_the_single_run_s() {
    let rt = kafka::rt();
    let topic = kafka::topic(&rt, "group-clicks", 6);
    let (reference, grouped) = schemas(&rt, "rekey_reference", "rekey_members");
    let job = |schema: &str, bounded: bool| {
        count_per_ad(
            &topic,
            schema,
            bounded,
            "SET 'execution.checkpointing.interval' = '300 ms';
             SET 'execution.checkpointing.dir' = 'checkpoints';",
        )
    };
    let records = clicks_and_impressions(&topic, None, 12_000);
    let closed = |schema: &str| closed_windows(&rt, schema);

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("job.sql"), job(&grouped, false)).unwrap();
    let group = format!("{topic}-group");
    let mut members = Members(vec![
        member(dir.path(), &group, "a.log", "off"),
        member(dir.path(), &group, "b.log", "off"),
    ]);
    let producer = std::thread::spawn(move || produce_records(records.into_iter(), 2_000));
    // Member b leaves mid-stream (its tasks handed back with savepoints) and comes back.
    wait_for(dir.path(), "windows counted", || {
        closed(&grouped).len() > 50
    });
    sigterm(&members[1]);
    let left = members[1].wait().unwrap();
    assert!(left.success(), "{left}:\n{}", log(dir.path(), "b.log"));
    members[1] = member(dir.path(), &group, "c.log", "off");
    producer.join().unwrap();

    let out = single_run(job(&reference, true));
    let late = set_aside(&out);
    assert!(late > 50, "{late} rows set aside as late:\n{out}");
    let want = closed(&reference);
    assert!(want.len() > 300, "{} windows", want.len());
    wait_for(dir.path(), "the group to count every window", || {
        closed(&grouped).len() >= want.len()
    });
    for m in members.iter_mut() {
        sigterm(m);
        assert!(m.wait().unwrap().success());
    }
    let logs = logs(dir.path(), &["a.log", "b.log", "c.log"]);
    let got = closed(&grouped);
    assert!(
        got == want,
        "the group's windows differ from the single run's ({} and {}); logs:\n{}",
        got.len(),
        want.len(),
        logs.join("\n----\n")
    );
    assert!(
        logs[0].contains("12 tasks in 2 stages") && logs[0].contains("re-keyed through weir-"),
        "{}",
        logs[0]
    );
    // c went on from b's savepoints (or, were one slow on a loaded machine, checkpoints).
    assert!(logs[2].contains("took over from"), "{}", logs[2]);
    println!("the members' logs:\n{}", logs.join("\n----\n"));
}

#[test]
#[ignore = "needs the broker and PostgreSQL: run with scripts/test"]
fn the_attribution_job_on_three_members_one_killed_writes_a_single_run_s_rows_exactly_once() {
    let rt = kafka::rt();
    let clicks = kafka::topic(&rt, "group-att-clicks", 6);
    // Not co-partitioned: both are re-keyed by (ad, user) for the join anyway.
    let impressions = kafka::topic(&rt, "group-att-impressions", 4);
    let (reference, grouped) = schemas(&rt, "attribution_reference", "attribution_members");
    let url = postgres::url();
    // The interval join of clicks to the impressions they follow within 10 s (both
    // partitioned by user, joined by ad and user), each attributed click, and a count per ad.
    let job = |schema: &str, bounded: bool| {
        format!(
            "SET 'execution.checkpointing.interval' = '300 ms';
             SET 'execution.checkpointing.dir' = 'checkpoints';
             {}{}
             CREATE TABLE attributed_out (click_id BIGINT, impression_id BIGINT, ad_id BIGINT,
               click_time TIMESTAMP(3))
             WITH ('connector' = 'jdbc', 'url' = '{url}', 'table-name' = '{schema}.attributed');
             CREATE TABLE clicks_per_ad (ad_id BIGINT, clicks BIGINT, PRIMARY KEY (ad_id) NOT ENFORCED)
             WITH ('connector' = 'jdbc', 'url' = '{url}', 'table-name' = '{schema}.clicks_per_ad');
             CREATE VIEW attributed AS
             SELECT c.id AS click_id, i.id AS impression_id, c.ad_id, c.rt AS click_time
             FROM clicks c JOIN impressions i
               ON c.ad_id = i.ad_id AND c.user_id = i.user_id
              AND c.rt BETWEEN i.rt AND i.rt + INTERVAL '10' SECOND;
             INSERT INTO attributed_out SELECT * FROM attributed;
             INSERT INTO clicks_per_ad SELECT ad_id, COUNT(*) FROM attributed GROUP BY ad_id;",
            events_table("clicks", &clicks, bounded),
            events_table("impressions", &impressions, bounded)
        )
    };
    let records = clicks_and_impressions(&clicks, Some(&impressions), 9_000);
    let attributed = |schema: &str| {
        query_rows(
            &rt,
            &format!("SELECT * FROM {schema}.attributed WHERE ad_id <> 99"),
        )
    };
    let per_ad = |schema: &str| {
        query_rows(
            &rt,
            &format!("SELECT * FROM {schema}.clicks_per_ad WHERE ad_id <> 99"),
        )
    };

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("job.sql"), job(&grouped, false)).unwrap();
    let group = format!("{clicks}-group");
    let mut members = Members(vec![
        member(dir.path(), &group, "a.log", "off"),
        member(dir.path(), &group, "b.log", "off"),
        member(dir.path(), &group, "c.log", "off"),
    ]);
    let producer = std::thread::spawn(move || produce_records(records.into_iter(), 1_500));
    // Member a is killed mid-stream, once every member runs tasks (so none moves until the
    // kill), each of a's checkpointed since a took it, and rows arrive; d starts later.
    wait_for(
        dir.path(),
        "every member to run tasks, a's checkpointed, and rows to arrive",
        || {
            let held = logs(dir.path(), &["a.log", "b.log", "c.log"]).map(|l| tasks_held(&l));
            held.iter().all(|h| !h.is_empty())
                && (held[0].iter()).all(|&t| newest_is_a_checkpoint(dir.path(), t))
                && attributed(&grouped).len() > 300
        },
    );
    // What the survivors logged before the kill (a hand-back, a start) does not count.
    let before_kill = logs(dir.path(), &["b.log", "c.log"]).map(|l| l.len());
    members[0].kill().unwrap();
    members[0].wait().unwrap();
    let a_held = tasks_held(&log(dir.path(), "a.log"));
    wait_for(dir.path(), "a's tasks to be taken over", || {
        let mut held = tasks_held(&log(dir.path(), "b.log"));
        held.extend(tasks_held(&log(dir.path(), "c.log")));
        a_held.iter().all(|t| held.contains(t))
    });
    members.push(member(dir.path(), &group, "d.log", "off"));
    producer.join().unwrap();

    single_run(job(&reference, true));
    let want = (attributed(&reference), per_ad(&reference));
    assert!(want.0.len() > 1_000, "{} attributed", want.0.len());
    // Done when as many clicks are attributed and counted (more, were any written twice).
    let counted = |schema: &str| {
        query_rows(
            &rt,
            &format!("SELECT sum(clicks) FROM {schema}.clicks_per_ad WHERE ad_id <> 99"),
        )
        .first()
        .and_then(|s| s.trim_matches(|c| c == '(' || c == ')').parse::<i64>().ok())
        .unwrap_or(0)
    };
    let want_counted = counted(&reference);
    wait_for(dir.path(), "the group to attribute every click", || {
        attributed(&grouped).len() >= want.0.len() && counted(&grouped) >= want_counted
    });
    for m in &mut members[1..] {
        sigterm(m);
        assert!(m.wait().unwrap().success());
    }
    let logs = logs(dir.path(), &["a.log", "b.log", "c.log", "d.log"]);
    let got = (attributed(&grouped), per_ad(&grouped));
    assert!(
        got == want,
        "the group's rows differ from the single run's ({} and {} attributed); logs:\n{}",
        got.0.len(),
        want.0.len(),
        logs.join("\n----\n")
    );
    // The others took each of a's tasks up from the checkpoint a wrote (every one had one).
    // Later moves (to d, when it joined) go from savepoints; the logs have no common clock
    // to order lines between them, so it is enough that one took it from a checkpoint.
    let survivors = after_kill(&logs, before_kill);
    for t in &a_held {
        assert!(
            (survivors.lines()).any(|l| l.starts_with(&format!("weir: task {t} (stage "))
                && l.contains("took over from checkpoint")),
            "task {t} of the killed member:\n{survivors}"
        );
    }
    println!("the members' logs:\n{}", logs.join("\n----\n"));
}

/// The re-keying count per ad with its checkpoints and its members in object storage (a bucket
/// of the S3-protocol server scripts/test starts): three members started together (joining one
/// at a time), one killed with -9 mid-stream, whose tasks the others take once the killed
/// member's leases (2 s here) have ended, and a fourth started later; the windows equal the
/// single run's. A job run alone is then refused the group's location.
#[test]
#[cfg(feature = "object-store")]
#[ignore = "needs the broker, PostgreSQL and an S3-protocol server: run with scripts/test"]
fn a_group_in_object_storage_survives_a_member_killed_and_gives_the_single_run_s_windows() {
    let rt = kafka::rt();
    let topic = kafka::topic(&rt, "group-s3-clicks", 6);
    let (reference, grouped) = schemas(&rt, "s3_reference", "s3_members");
    let bucket = std::env::var("WEIR_S3_BUCKET").unwrap_or_else(|_| "weir-test".into());
    let location = format!(
        "s3://{bucket}/groups/{}",
        weir_state::store_files::unique_id()
    );
    let job = |schema: &str, bounded: bool, checkpoints: &str| {
        let settings = format!(
            "SET 'execution.checkpointing.interval' = '1 s';
             SET 'execution.checkpointing.dir' = '{checkpoints}';
             SET 'weir.checkpointing.lock-lease' = '2 s';"
        );
        count_per_ad(&topic, schema, bounded, &settings)
    };
    let records = clicks_and_impressions(&topic, None, 12_000);
    let closed = |schema: &str| closed_windows(&rt, schema);

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("job.sql"), job(&grouped, false, &location)).unwrap();
    let group = format!("{topic}-group");
    let mut members = Members(vec![
        member(dir.path(), &group, "a.log", "127.0.0.1:0"),
        member(dir.path(), &group, "b.log", "off"),
        member(dir.path(), &group, "c.log", "off"),
    ]);
    let producer = std::thread::spawn(move || produce_records(records.into_iter(), 2_000));
    wait_for(
        dir.path(),
        "the three members to run four tasks each",
        || {
            let l = logs(dir.path(), &["a.log", "b.log", "c.log"]);
            l.iter().all(|l| tasks_held(l).len() == 4)
        },
    );
    wait_for(dir.path(), "windows counted", || {
        closed(&grouped).len() > 50
    });
    // a's web API shows the job's operators as a runs them: each operator's subtasks are the
    // tasks of a that run it, numbered by the partition each reads (0-5 in both stages, where
    // the tasks are numbered 0-11), the repartition topics not among the nodes.
    let a_log = log(dir.path(), "a.log");
    let addr = web_address(&a_log);
    let held_by_a = tasks_held(&a_log);
    let mut want: Vec<i64> = held_by_a.iter().map(|&t| i64::from(t % 6)).collect();
    want.sort();
    want.dedup();
    let partitions = |m: &serde_json::Value| -> Vec<i64> {
        let mut p: Vec<i64> = (m["nodes"].as_array().into_iter().flatten())
            .flat_map(|n| n["subtasks"].as_array().into_iter().flatten())
            .map(|s| s["subtask"].as_i64().unwrap())
            .collect();
        p.sort();
        p.dedup();
        p
    };
    let mut job_metrics = serde_json::Value::Null;
    wait_for(dir.path(), "a's /api/v1/metrics to show its tasks", || {
        job_metrics = http_get(&addr, "/api/v1/metrics");
        partitions(&job_metrics) == want
    });
    let nodes = job_metrics["nodes"].as_array().unwrap();
    assert!(
        (nodes.iter()).all(|n| !n["name"].as_str().unwrap().starts_with("repartition")),
        "{job_metrics:#}"
    );
    let killed = tasks_held(&log(dir.path(), "b.log"));
    // What the survivors logged before the kill (a restart or a hand-back) does not count.
    let before_kill: Vec<usize> = ["a.log", "c.log"]
        .iter()
        .map(|l| log(dir.path(), l).len())
        .collect();
    members[1].kill().unwrap();
    members[1].wait().unwrap();
    // a and c take b's tasks once its leases ended, each from the newest checkpoint.
    wait_for(
        dir.path(),
        "the others to take the killed member's tasks",
        || {
            let l = logs(dir.path(), &["a.log", "c.log"]);
            let (a, c) = (tasks_held(&l[0]), tasks_held(&l[1]));
            killed.iter().all(|t| a.contains(t) || c.contains(t))
        },
    );
    members[1] = member(dir.path(), &group, "d.log", "off");
    producer.join().unwrap();

    let single = tempfile::tempdir().unwrap();
    let out = single_run(job(
        &reference,
        true,
        &single.path().join("chk").to_string_lossy(),
    ));
    assert!(set_aside(&out) > 50, "{out}");
    let want = closed(&reference);
    assert!(want.len() > 300, "{} windows", want.len());
    wait_for(dir.path(), "the group to count every window", || {
        closed(&grouped).len() >= want.len()
    });
    for m in members.iter_mut() {
        sigterm(m);
        assert!(m.wait().unwrap().success());
    }
    let logs = logs(dir.path(), &["a.log", "b.log", "c.log", "d.log"]);
    let got = closed(&grouped);
    assert!(
        got == want,
        "the group's windows differ from the single run's ({} and {}); logs:\n{}",
        got.len(),
        want.len(),
        logs.join("\n----\n")
    );
    assert!(logs[0].contains("12 tasks in 2 stages"), "{}", logs[0]);
    // Each of the killed member's tasks went on from a checkpoint of its own, after the kill.
    let after_kill = [&logs[0][before_kill[0]..], &logs[2][before_kill[1]..]];
    for t in &killed {
        let prefix = format!("weir: task {t} (");
        let took_over = (after_kill.iter().flat_map(|l| l.lines()))
            .any(|l| l.starts_with(&prefix) && l.contains("took over from checkpoint"));
        assert!(took_over, "task {t}:\n{}", logs.join("\n----\n"));
    }
    assert!(logs[3].contains("took over from"), "{}", logs[3]);

    // The location holds the group (its record, its tasks' checkpoints) and no member's lease
    // once all have left; a job run alone there is refused.
    let storage = weir_state::checkpoint::ObjectStoreStorage::from_url(&location).unwrap();
    let names = storage.names().unwrap();
    assert!(names.iter().any(|n| n == "_group"), "{names:?}");
    assert!(names.iter().any(|n| n == "task-11"), "{names:?}");
    let left = storage
        .within("_group")
        .leases("members", &SystemClock)
        .unwrap();
    assert!(left.is_empty(), "{left:?}");
    std::fs::write(dir.path().join("alone.sql"), job(&grouped, true, &location)).unwrap();
    let (code, out) = common::weir_out(dir.path(), &["run", "alone.sql", "--http", "off"]);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("it holds a group's checkpoints"), "{out}");
    println!("the members' logs:\n{}", logs.join("\n----\n"));
}
