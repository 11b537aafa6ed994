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
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka::bootstrap())
        .set("enable.idempotence", "true")
        .create()
        .unwrap();
    let started = Stopwatch::start(&SystemClock);
    for i in from..to {
        let value = format!(
            r#"{{"id":{i},"user_id":{},"amount":{},"ts":{}}}"#,
            i % 97,
            (i * 7919) % 1000,
            1_700_000_000_000 + i * 10
        );
        let key = (i % 97).to_string();
        let mut record = BaseRecord::to(topic)
            .key(&key)
            .payload(&value)
            .partition((i % 6) as i32);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, r)) => {
                    producer.poll(Duration::from_millis(10));
                    record = r;
                }
            }
        }
        if per_second > 0 && (i - from) % 200 == 0 {
            producer.poll(Duration::ZERO);
            let due = Duration::from_millis(((i - from) * 1000 / per_second) as u64);
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

fn log(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_default()
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
        let Ok(n) = n.parse::<i32>() else { continue };
        if what.starts_with("started") || what.starts_with("took over") {
            held.insert(n);
        } else if what.starts_with("handed back") {
            held.remove(&n);
        }
    }
    held.into_iter().collect()
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
    let (reference, grouped) = rt.block_on(async {
        (
            postgres::fresh_schema("group_reference").await.name,
            postgres::fresh_schema("group_members").await.name,
        )
    });

    // The group, while the records are written at 3,000 a second.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("job.sql"), job(&topic, &grouped, false)).unwrap();
    let group = format!("{topic}-group");
    let mut members = vec![
        member(dir.path(), &group, "a.log", "off"),
        member(dir.path(), &group, "b.log", "127.0.0.1:0"),
        member(dir.path(), &group, "c.log", "127.0.0.1:0"),
    ];
    let producer = {
        let topic = topic.clone();
        std::thread::spawn(move || produce(&topic, 0, RECORDS, 3_000))
    };
    // Member a is killed once it runs tasks and the sink has some rows, mid-stream.
    wait_for(
        dir.path(),
        "member a to run tasks and rows to arrive",
        || !tasks_held(&log(dir.path(), "a.log")).is_empty() && rows(&rt, &grouped).len() > 1_000,
    );
    let a_held = tasks_held(&log(dir.path(), "a.log"));
    members[0].kill().unwrap();
    members[0].wait().unwrap();
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
    let addr = (d_log.lines())
        .find_map(|l| l.strip_prefix("web UI and metrics: http://"))
        .map(|a| a.trim_end_matches('/').to_string())
        .unwrap_or_else(|| panic!("no address in d's log:\n{d_log}"));
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
        let pid = m.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    }
    for m in &mut members[1..] {
        assert!(m.wait().unwrap().success());
    }
    let got = rows(&rt, &grouped);
    let logs: Vec<String> = ["a.log", "b.log", "c.log", "d.log"]
        .iter()
        .map(|l| log(dir.path(), l))
        .collect();
    assert_eq!(got.len(), want.len(), "logs:\n{}", logs.join("\n----\n"));
    assert!(got == want, "the group's rows differ from the single run's");
    // The members said which tasks they took over from a checkpoint.
    let survivors = format!("{}{}", logs[1], logs[2]);
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
    // Keyed state: a count per key over rows of every partition.
    refused(
        format!(
            "{checkpoints}{}
             CREATE TABLE out (k BIGINT, n BIGINT) WITH ('connector' = 'print');
             INSERT INTO out SELECT k, COUNT(*) FROM a
             GROUP BY k, TUMBLE(rt, INTERVAL '1' MINUTE);",
            table("a", &six)
        ),
        &[],
        &["is partitioned by hash(k)", "repartition topics"],
    );
    // An upsert sink, keyed by its primary key: one key's updates would come from every task.
    let url = postgres::url();
    refused(
        format!(
            "{checkpoints}{}
             CREATE TABLE out (k BIGINT, ts BIGINT, PRIMARY KEY (k) NOT ENFORCED)
             WITH ('connector' = 'jdbc', 'url' = '{url}', 'table-name' = 'group_upsert');
             INSERT INTO out SELECT k, ts FROM a;",
            table("a", &six)
        ),
        &[],
        &["→ `out` is partitioned by hash(k)"],
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
