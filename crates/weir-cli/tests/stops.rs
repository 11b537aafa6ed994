//! How `weir run` ends when it does not reach the end of its input: a signal, a failed start,
//! an input that is mostly dead letters. None of them may cost the previous output.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const PREVIOUS: &str = "ts,key\n1,previous run\n";

fn write_job(dir: &Path) {
    std::fs::write(
        dir.join("job.sql"),
        "CREATE TABLE events (key STRING, ts BIGINT,
           rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
         ) WITH ('connector' = 'weir-generator', 'generator.scenario' = 'events', 'generator.rate' = '2000');
         CREATE TABLE out1 (ts BIGINT, key STRING) WITH ('connector' = 'filesystem', 'path' = '${out}/out.csv', 'format' = 'csv', 'csv.header' = 'true');
         INSERT INTO out1 SELECT ts, key FROM events;",
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("out")).unwrap();
    std::fs::write(dir.join("out/out.csv"), PREVIOUS).unwrap();
}

/// A job whose sink fails on every start: its folder cannot be made (a file is in the way), a
/// failure of the outside world, which a restart may get past. It is restarted `attempts`
/// times, `delay` apart.
fn write_failing_job(dir: &Path, attempts: u32, delay: &str) {
    std::fs::write(dir.join("events.csv"), "k1,1\nk2,2\n").unwrap();
    std::fs::write(dir.join("blocked"), "a file").unwrap();
    std::fs::write(
        dir.join("job.sql"),
        format!(
            "SET 'execution.checkpointing.interval' = '1 s';
             SET 'restart-strategy.type' = 'fixed-delay';
             SET 'restart-strategy.fixed-delay.attempts' = '{attempts}';
             SET 'restart-strategy.fixed-delay.delay' = '{delay}';
             CREATE TABLE events (key STRING, ts BIGINT) WITH ('connector' = 'filesystem', 'path' = 'events.csv', 'format' = 'csv');
             CREATE TABLE out1 (ts BIGINT, key STRING) WITH ('connector' = 'filesystem', 'path' = 'blocked/out', 'format' = 'csv');
             INSERT INTO out1 SELECT ts, key FROM events;"
        ),
    )
    .unwrap();
}

/// Sends `signal` (`TERM`, `INT`) to process `pid`.
fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pid}");
}

/// Starts the unbounded job, lets it write for a while, sends `signal`, and waits.
fn run_and_signal(dir: &Path, signal: &str) -> Output {
    let child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", "job.sql", "--var", "out=out"])
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Until the sink has written rows into its in-progress file.
    let inprogress = dir.join("out/.out.csv.inprogress");
    for _ in 0..300 {
        if std::fs::metadata(&inprogress).is_ok_and(|m| m.len() > 100) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(inprogress.exists(), "the job never started writing");
    send_signal(child.id(), signal);
    child.wait_with_output().unwrap()
}

fn check_stopped(dir: &Path, out: &Output, signal: &str, code: i32) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    assert!(
        stderr.contains(&format!("stopped by signal ({signal})"))
            && stderr.contains("rows in:")
            && stderr.contains("sink `out1` (file): incomplete output discarded"),
        "{stderr}"
    );
    // The previous run's output is untouched and nothing half-written is left.
    assert_eq!(
        std::fs::read_to_string(dir.join("out/out.csv")).unwrap(),
        PREVIOUS
    );
    assert!(!dir.join("out/.out.csv.inprogress").exists());
}

#[test]
fn sigterm_stops_the_job_with_a_summary_and_exit_143_keeping_the_previous_output() {
    let dir = tempfile::tempdir().unwrap();
    write_job(dir.path());
    let out = run_and_signal(dir.path(), "TERM");
    check_stopped(dir.path(), &out, "SIGTERM", 143);
}

#[test]
fn sigint_stops_the_job_with_a_summary_and_exit_130_keeping_the_previous_output() {
    let dir = tempfile::tempdir().unwrap();
    write_job(dir.path());
    let out = run_and_signal(dir.path(), "INT");
    check_stopped(dir.path(), &out, "SIGINT", 130);
}

#[test]
fn a_failed_start_keeps_the_previous_output() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("job.sql"),
        "CREATE TABLE events (key STRING, ts BIGINT) WITH ('connector' = 'filesystem', 'path' = '${input}/events.csv', 'format' = 'csv');
         CREATE TABLE out1 (ts BIGINT, key STRING) WITH ('connector' = 'filesystem', 'path' = 'out/out.csv', 'format' = 'csv', 'csv.header' = 'true');
         INSERT INTO out1 SELECT ts, key FROM events;",
    )
    .unwrap();
    std::fs::create_dir_all(d.join("out")).unwrap();
    std::fs::write(d.join("out/out.csv"), PREVIOUS).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", "job.sql", "--var", "input=/nonexistent"])
        .current_dir(d)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        std::fs::read_to_string(d.join("out/out.csv")).unwrap(),
        PREVIOUS
    );
}

#[test]
fn an_input_of_mostly_dead_letters_fails_the_run_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A semicolon file read as commas: every other record has too few fields.
    let mut csv = String::new();
    for i in 0..100 {
        if i % 2 == 0 {
            csv.push_str(&format!("k{i},{i}\n"));
        } else {
            csv.push_str(&format!("k{i};{i}\n"));
        }
    }
    std::fs::write(d.join("events.csv"), csv).unwrap();
    std::fs::write(
        d.join("job.sql"),
        "CREATE TABLE events (key STRING, ts BIGINT) WITH ('connector' = 'filesystem', 'path' = 'events.csv', 'format' = 'csv');
         CREATE TABLE out1 (ts BIGINT, key STRING) WITH ('connector' = 'filesystem', 'path' = 'out.csv', 'format' = 'csv');
         INSERT INTO out1 SELECT ts, key FROM events;",
    )
    .unwrap();
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["run", "job.sql"])
            .args(extra)
            .current_dir(d)
            .output()
            .unwrap()
    };
    let out = run(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("50 of 100 records read (50.0 %) are dead letters, more than the 10.0 %"),
        "{stderr}"
    );
    assert!(
        !d.join("out.csv").exists(),
        "a failed job publishes no output"
    );
    let out = run(&["--max-dead-letter-share", "0.6"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("dead letters:   50 (50.00 % of the 100 records read)"),
        "{stderr}"
    );
}

#[test]
fn a_job_that_keeps_failing_is_restarted_as_its_strategy_says_then_fails_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_failing_job(d, 2, "10 ms");
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", "job.sql"])
        .current_dir(d)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr
            .matches("restart 1 from the newest checkpoint")
            .count(),
        1,
        "{stderr}"
    );
    assert_eq!(
        stderr
            .matches("restart 2 from the newest checkpoint")
            .count(),
        1,
        "{stderr}"
    );
    assert!(
        stderr.contains("the job failed again after 2 restarts from its checkpoints"),
        "{stderr}"
    );
}

/// A `weir` process whose stderr is read as it comes: the address of its HTTP server, and
/// everything else.
struct Served {
    child: std::process::Child,
    addr: String,
    /// Where the process writes its generated action token.
    token_file: std::path::PathBuf,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
    reader: std::thread::JoinHandle<()>,
}

impl Served {
    fn start(dir: &Path, args: &[&str]) -> Served {
        use std::io::BufRead;
        // The generated action token goes into $XDG_RUNTIME_DIR/weir/http-PID.token.
        let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(args)
            .current_dir(dir)
            .env("XDG_RUNTIME_DIR", dir.join("run"))
            .env_remove("WEIR_HTTP_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let token_file = dir
            .join("run/weir")
            .join(format!("http-{}.token", child.id()));
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let pipe = child.stderr.take().unwrap();
        let reader = {
            let stderr = stderr.clone();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    if let Some(a) = line.strip_prefix("web UI and metrics: http://") {
                        let _ = tx.send(a.trim_end_matches('/').to_string());
                    }
                    let mut s = stderr.lock().unwrap();
                    s.push_str(&line);
                    s.push('\n');
                }
            })
        };
        let addr = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("no address printed: {}", stderr.lock().unwrap()));
        Served {
            child,
            addr,
            token_file,
            stderr,
            reader,
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    fn wait_for_line(&self, text: &str) {
        for _ in 0..600 {
            if self.stderr().contains(text) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("no `{text}` in: {}", self.stderr());
    }

    /// One HTTP/1.1 request on a new connection, with the job's action token; the whole answer.
    fn request(&self, method: &str, path: &str) -> String {
        let token = std::fs::read_to_string(&self.token_file)
            .unwrap_or_else(|e| panic!("{}: {e}", self.token_file.display()));
        self.request_as(method, path, &format!("Bearer {}", token.trim()))
    }

    /// One HTTP/1.1 request with `authorization` (none when empty).
    fn request_as(&self, method: &str, path: &str, authorization: &str) -> String {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&self.addr).unwrap();
        let auth = if authorization.is_empty() {
            String::new()
        } else {
            format!("Authorization: {authorization}\r\n")
        };
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n",
            self.addr
        )
        .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        answer
    }

    fn wait(self) -> (std::process::ExitStatus, String) {
        let mut child = self.child;
        let status = child.wait().unwrap();
        self.reader.join().unwrap();
        let stderr = self.stderr.lock().unwrap().clone();
        (status, stderr)
    }
}

#[test]
fn a_stop_through_the_http_api_ends_the_job_as_sigterm_does() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_job(d);
    // A token file left by a process that has ended (no such PID can run: past pid_max) goes
    // when the next job writes its own; a running process's stays.
    std::fs::create_dir_all(d.join("run/weir")).unwrap();
    let stale = d.join("run/weir/http-999999999.token");
    let running = d
        .join("run/weir")
        .join(format!("http-{}.token", std::process::id()));
    std::fs::write(&stale, "old\n").unwrap();
    std::fs::write(&running, "this test's\n").unwrap();
    let weir = Served::start(
        d,
        &[
            "run",
            "job.sql",
            "--var",
            "out=out",
            "--http",
            "127.0.0.1:0",
        ],
    );
    let inprogress = d.join("out/.out.csv.inprogress");
    for _ in 0..300 {
        if std::fs::metadata(&inprogress).is_ok_and(|m| m.len() > 100) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!stale.exists() && running.exists());
    // Without the token nobody may stop it (another local user, issue #25 item 17); the
    // token is in a file only the job's user can read, named on stderr.
    let refused = weir.request_as("POST", "/api/v1/stop", "");
    assert!(
        refused.starts_with("HTTP/1.1 401")
            && refused.contains(&*weir.token_file.to_string_lossy()),
        "{refused}"
    );
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&weir.token_file)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        let folder = weir.token_file.parent().unwrap();
        let mode = std::fs::metadata(folder).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
    }
    let answer = weir.request("POST", "/api/v1/stop");
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    let token_file = weir.token_file.clone();
    let (status, stderr) = weir.wait();
    assert_eq!(status.code(), Some(143), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "actions (stop, savepoint) need the token in {}",
            token_file.display()
        )),
        "{stderr}"
    );
    assert!(!token_file.exists(), "the token file goes with the job");
    assert!(
        stderr.contains("stopped through the HTTP API before the end of the input")
            && stderr.contains("rows in:")
            && stderr.contains("sink `out1` (file): incomplete output discarded"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(d.join("out/out.csv")).unwrap(),
        PREVIOUS
    );
    // Logs into a pipe are plain text.
    assert!(
        stderr.contains("WARN") && !stderr.contains('\u{1b}'),
        "{stderr:?}"
    );
}

#[test]
fn a_job_that_keeps_failing_is_shown_failed_while_its_server_lingers() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_failing_job(d, 1, "10 ms");
    let weir = Served::start(
        d,
        &[
            "run",
            "job.sql",
            "--http",
            "127.0.0.1:0",
            "--http-linger",
            "30",
        ],
    );
    weir.wait_for_line("the web UI stays up for 30 s");
    let job = weir.request("GET", "/api/v1/job");
    assert!(
        job.contains(r#""state":"failed""#) && job.contains("the job failed again after 1 restart"),
        "{job}"
    );
    let stop = weir.request("POST", "/api/v1/stop");
    assert!(stop.starts_with("HTTP/1.1 409"), "{stop}");
    // A savepoint asked for by signal is answered that the job has ended.
    send_signal(weir.child.id(), "USR1");
    weir.wait_for_line("weir: no savepoint: the job has ended");
    send_signal(weir.child.id(), "INT");
    let (status, stderr) = weir.wait();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("restart 1 from the newest checkpoint"),
        "{stderr}"
    );
}

/// Waits for `child` to exit, for at most about 60 s (it would otherwise wait an hour): a
/// hang detector, not a timing assertion.
fn exit_of(child: &mut std::process::Child) -> std::process::ExitStatus {
    for _ in 0..600 {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap();
    panic!("the job did not act on the signal");
}

/// Issue #25 item 11: SIGTERM while the job waits (an hour) to restart after a failure stops
/// it at once, exit 143; SIGUSR1 then is answered that there is no savepoint to take.
#[test]
fn a_signal_stops_a_job_waiting_to_restart() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_failing_job(d, 2, "1 h");
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", "job.sql", "--http", "off"])
        .current_dir(d)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    let mut line = String::new();
    while stderr.read_line(&mut line).unwrap() > 0 {
        seen.push_str(&line);
        if line.contains("restart 1 from the newest checkpoint") {
            break;
        }
        line.clear();
    }
    assert!(seen.contains("restart 1"), "{seen}");
    // A savepoint asked for while there is no job to take it of is answered so.
    send_signal(child.id(), "USR1");
    line.clear();
    while stderr.read_line(&mut line).unwrap() > 0 {
        seen.push_str(&line);
        if line.contains("no savepoint") {
            break;
        }
        line.clear();
    }
    assert!(
        line.contains("no savepoint: the job is waiting to restart after a failure"),
        "{seen}"
    );
    send_signal(child.id(), "TERM");
    let code = exit_of(&mut child).code();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert_eq!(code, Some(143), "{seen}{rest}");
    assert!(
        rest.contains("stopped by signal (SIGTERM) while waiting to restart"),
        "{rest}"
    );
}

/// Issue #25 item 11: a second SIGTERM stops at once while the first waits on a savepoint that
/// cannot complete (the print sink is blocked on a pipe nobody reads).
#[test]
fn a_second_signal_stops_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("job.sql"),
        "SET 'execution.checkpointing.interval' = '1 h';
         CREATE TABLE events (key STRING, ts BIGINT)
           WITH ('connector' = 'weir-generator', 'generator.scenario' = 'events');
         CREATE TABLE out1 (key STRING, ts BIGINT) WITH ('connector' = 'print');
         INSERT INTO out1 SELECT key, ts FROM events;",
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", "job.sql", "--http", "off"])
        .current_dir(d)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once the sink prints, the job runs; nothing reads on, so the pipe fills with the rows
    // ahead of any barrier: the print sink blocks, and so does the savepoint.
    let mut first = [0u8; 1];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
    send_signal(child.id(), "TERM");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the first signal should wait for the savepoint, which the blocked sink holds up"
    );
    // Again until it ends: two signals sent before the first is taken would count as one.
    let mut exited = None;
    for _ in 0..120 {
        send_signal(child.id(), "TERM");
        std::thread::sleep(Duration::from_millis(500));
        if let Some(status) = child.try_wait().unwrap() {
            exited = Some(status);
            break;
        }
    }
    let code = exited
        .expect("the job did not act on a second signal")
        .code();
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(code, Some(143), "{stderr}");
    assert!(
        stderr.contains("SIGTERM again: stopping at once"),
        "{stderr}"
    );
}

/// Issue #25 item 12: a NULL in an upsert table's key is the database's final answer (a NOT
/// NULL constraint), not a transient failure: the job fails at once, without the restart
/// strategy's ten tries over minutes.
#[test]
fn a_null_upsert_key_fails_the_job_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("events.csv"), "k1,1\n,2\nk3,3\n").unwrap();
    std::fs::write(
        d.join("job.sql"),
        "SET 'execution.checkpointing.interval' = '1 s';
         SET 'restart-strategy.type' = 'fixed-delay';
         SET 'restart-strategy.fixed-delay.attempts' = '3';
         SET 'restart-strategy.fixed-delay.delay' = '1 h';
         CREATE TABLE events (key STRING, ts BIGINT) WITH ('connector' = 'filesystem', 'path' = 'events.csv', 'format' = 'csv');
         CREATE TABLE latest (key STRING, ts BIGINT, PRIMARY KEY (key) NOT ENFORCED)
           WITH ('connector' = 'jdbc', 'url' = 'jdbc:sqlite:out.db', 'table-name' = 'latest');
         INSERT INTO latest SELECT key, ts FROM events;",
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", "job.sql", "--http", "off"])
        .current_dir(d)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let code = exit_of(&mut child).code();
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("NOT NULL"), "{stderr}");
    assert!(!stderr.contains("restart 1"), "{stderr}");
}
