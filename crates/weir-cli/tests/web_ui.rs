//! The web UI of `weir run` and `weir demo` in a real browser: headless Chromium driven
//! through chromedriver (WebDriver, with fantoccini) against the server the command starts.
//!
//! They need Debian's `chromium` and `chromium-driver` (or `WEIR_CHROMIUM` and
//! `WEIR_CHROMEDRIVER` naming the binaries), so they are ignored by a plain `cargo test`;
//! `scripts/test` installs both and runs them. Screenshots of every page checked go to
//! `$CARGO_TARGET_TMPDIR/web_ui/` (test artefacts, not committed).

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use fantoccini::{Client, ClientBuilder, Locator};
use weir_core::time::Stopwatch;

// ---- the browser ----

/// The Chromium and chromedriver binaries, or a panic saying how to get them.
fn browser_binaries() -> (PathBuf, PathBuf) {
    let find = |var: &str, default: &str| {
        let path = PathBuf::from(std::env::var(var).unwrap_or_else(|_| default.to_string()));
        assert!(
            path.is_file(),
            "the web UI tests drive a real browser, and {} is missing: install Debian's \
             chromium and chromium-driver (`apt-get install chromium chromium-driver`; \
             scripts/test does) or name the binary with {var}",
            path.display()
        );
        path
    };
    (
        find("WEIR_CHROMIUM", "/usr/bin/chromium"),
        find("WEIR_CHROMEDRIVER", "/usr/bin/chromedriver"),
    )
}

fn elapsed(since: &Stopwatch) -> Duration {
    Duration::from_nanos(since.elapsed_nanos(&weir_core::SystemClock))
}

/// A free TCP port on 127.0.0.1 (free when asked; taken by whoever binds it next).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A chromedriver process in a process group of its own, with the Chromium it starts:
/// killed, group and all, when dropped.
struct Chromedriver {
    child: Child,
    url: String,
}

impl Chromedriver {
    /// Started on a free port; again on another if it exits before it listens (the port found
    /// free was taken first by another process).
    fn start(binary: &Path, log: &Path) -> Chromedriver {
        for _ in 0..5 {
            if let Some(driver) = Chromedriver::try_start(binary, log) {
                return driver;
            }
        }
        panic!(
            "chromedriver exited before it listened, five times; its log: {}",
            log.display()
        );
    }

    fn try_start(binary: &Path, log: &Path) -> Option<Chromedriver> {
        use std::os::unix::process::CommandExt;
        let port = free_port();
        let child = Command::new(binary)
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
        let mut driver = Chromedriver {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let started = Stopwatch::start(&weir_core::SystemClock);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if driver.child.try_wait().unwrap().is_some() {
                return None;
            }
            assert!(
                elapsed(&started) < Duration::from_secs(30),
                "chromedriver did not listen on port {port} within 30 s; its log: {}",
                log.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(driver)
    }
}

impl Drop for Chromedriver {
    fn drop(&mut self) {
        // The whole group: chromedriver and the browser processes it started.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.wait();
    }
}

/// Opens a headless Chromium session (1280 x 800, a fresh profile, nothing fetched from the
/// network), runs `test` with it, saves a screenshot as `$CARGO_TARGET_TMPDIR/web_ui/{name}.png`
/// whether it passed or not, and closes the browser.
async fn with_browser<F, Fut>(name: &str, test: F) -> Result<()>
where
    F: FnOnce(Client) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let (chromium, chromedriver) = browser_binaries();
    let profile = tempfile::tempdir()?;
    let artefacts = Path::new(env!("CARGO_TARGET_TMPDIR")).join("web_ui");
    std::fs::create_dir_all(&artefacts)?;
    let driver = Chromedriver::start(
        &chromedriver,
        &artefacts.join(format!("{name}.chromedriver.log")),
    );
    let args = [
        "--headless".to_string(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--disable-quic".into(),
        "--no-first-run".into(),
        "--disable-background-networking".into(),
        "--disable-component-update".into(),
        "--disable-sync".into(),
        format!("--user-data-dir={}", profile.path().display()),
        "--window-size=1280,800".into(),
    ];
    let mut caps = serde_json::Map::new();
    caps.insert("browserName".into(), "chrome".into());
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({ "binary": chromium, "args": args }),
    );
    let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .with_context(|| format!("opening a Chromium session through {}", driver.url))?;
    client.set_window_size(1280, 800).await?;
    let result = test(client.clone()).await;
    let shot = artefacts.join(format!("{name}.png"));
    match client.screenshot().await {
        Ok(png) => {
            std::fs::write(&shot, png)?;
            eprintln!("screenshot: {}", shot.display());
        }
        Err(e) => eprintln!("no screenshot: {e}"),
    }
    let _ = client.close().await;
    drop(driver);
    result
}

/// Polls `probe` every 200 ms until it returns `Some`, for at most `within`.
async fn wait_for<T, F, Fut>(what: &str, within: Duration, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let started = Stopwatch::start(&weir_core::SystemClock);
    loop {
        match probe().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            // The page re-renders its tables every second: an element found a moment ago may
            // be gone. Look again.
            Err(e) if format!("{e:#}").contains("stale element") => {}
            Err(e) => return Err(e),
        }
        if elapsed(&started) > within {
            bail!("waited {} s for {what}", within.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The value of `attr` of every element `css` selects.
async fn attrs(client: &Client, css: &str, attr: &str) -> Result<Vec<String>> {
    let mut v = Vec::new();
    for e in client.find_all(Locator::Css(css)).await? {
        v.push(e.attr(attr).await?.unwrap_or_default());
    }
    Ok(v)
}

/// Clicks the button `css` and accepts the confirmation it asks for.
/// Answers the UI's question for the action token (asked when an action is refused for want
/// of it) with `token`.
async fn give_token(client: &Client, token: &str) -> Result<()> {
    wait_for(
        "the question for the token",
        Duration::from_secs(10),
        || async {
            let Ok(text) = client.get_alert_text().await else {
                return Ok(None);
            };
            ensure!(text.contains("need its token"), "asked: {text}");
            client.send_alert_text(token).await?;
            Ok(Some(client.accept_alert().await?))
        },
    )
    .await
}

async fn click_and_confirm(client: &Client, css: &str) -> Result<()> {
    let button = wait_for(
        &format!("{css} to be enabled"),
        Duration::from_secs(30),
        || async {
            let b = client.find(Locator::Css(css)).await?;
            Ok(b.is_enabled().await?.then_some(b))
        },
    )
    .await?;
    button.click().await?;
    wait_for("the confirmation", Duration::from_secs(10), || async {
        Ok(client.accept_alert().await.ok())
    })
    .await
}

// ---- weir ----

/// A `weir` process serving its web UI, killed when dropped. Its stderr is collected.
struct Weir {
    child: Child,
    /// `http://127.0.0.1:PORT/`, as printed.
    url: String,
    /// Where the process writes its generated action token.
    token_file: std::path::PathBuf,
    stderr: Arc<Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Weir {
    /// Starts `weir args` in `dir` and waits for the address it serves on.
    fn start(dir: &Path, args: &[&str]) -> Weir {
        // The generated action token goes into $XDG_RUNTIME_DIR/weir/http-PID.token.
        let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(args)
            .current_dir(dir)
            .env("XDG_RUNTIME_DIR", dir.join("run"))
            .env_remove("WEIR_HTTP_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr: Arc<Mutex<String>> = Arc::default();
        let (tx, rx) = mpsc::channel();
        let reader = {
            let stderr = stderr.clone();
            let pipe = child.stderr.take().unwrap();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    if let Some(url) = line.strip_prefix("web UI and metrics: ") {
                        let _ = tx.send(url.to_string());
                    }
                    let mut s = stderr.lock().unwrap();
                    s.push_str(&line);
                    s.push('\n');
                }
            })
        };
        let url = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| {
                let _ = child.kill();
                panic!(
                    "weir {args:?} printed no address within 60 s:\n{}",
                    stderr.lock().unwrap()
                )
            });
        assert!(
            url.starts_with("http://127.0.0.1:") && url.ends_with('/'),
            "{url}"
        );
        let token_file = dir
            .join("run/weir")
            .join(format!("http-{}.token", child.id()));
        Weir {
            child,
            url,
            token_file,
            stderr,
            reader: Some(reader),
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The job's action token, as its user reads it from the file.
    fn token(&self) -> String {
        std::fs::read_to_string(&self.token_file)
            .unwrap_or_else(|e| panic!("{}: {e}", self.token_file.display()))
            .trim()
            .to_string()
    }

    /// Waits for the process to exit; returns its status and whole stderr.
    fn wait(mut self, within: Duration) -> (ExitStatus, String) {
        let started = Stopwatch::start(&weir_core::SystemClock);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                elapsed(&started) < within,
                "weir did not exit within {} s:\n{}",
                within.as_secs(),
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        (status, self.stderr())
    }

    /// Waits until stderr has a line containing `text`.
    fn wait_for_line(&self, text: &str, within: Duration) {
        let started = Stopwatch::start(&weir_core::SystemClock);
        while !self.stderr().contains(text) {
            assert!(
                elapsed(&started) < within,
                "weir printed no `{text}` within {} s:\n{}",
                within.as_secs(),
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{name}");
    }
}

impl Drop for Weir {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The labels the UI gives the nodes of a job graph written as JSON: the name, or `name#id`
/// when several nodes share it.
fn labels(graph: &serde_json::Value) -> Vec<String> {
    let names: Vec<&str> = graph["nodes"]
        .as_array()
        .expect("a job graph's nodes")
        .iter()
        .map(|n| n["name"].as_str().expect("a node's name"))
        .collect();
    (names.iter().enumerate())
        .map(|(id, name)| {
            if names.iter().filter(|n| *n == name).count() > 1 {
                format!("{name}#{id}")
            } else {
                name.to_string()
            }
        })
        .collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

// ---- the tests ----

/// `weir demo --http 127.0.0.1:0 --http-linger 30`: the page draws the job graph, a box per
/// operator of the demo job, shows the job finished while the server lingers, and SIGINT
/// ends the linger.
#[tokio::test]
#[ignore = "needs Chromium: run with scripts/test"]
async fn the_demo_graph_has_an_element_per_operator() {
    browser_binaries();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let written = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "demo",
            "--rows",
            "20000",
            "--out",
            "out",
            "--write-job",
            "demo.json",
        ])
        .current_dir(d)
        .output()
        .unwrap();
    assert!(written.status.success(), "{written:?}");
    let graph: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("demo.json")).unwrap()).unwrap();
    let want = sorted(labels(&graph));
    assert!(want.len() >= 10, "{want:?}");

    let weir = Weir::start(
        d,
        &[
            "demo",
            "--rows",
            "20000",
            "--out",
            "out",
            "--http",
            "127.0.0.1:0",
            "--http-linger",
            "30",
        ],
    );
    let url = weir.url.clone();
    with_browser("demo_graph", |c| async move {
        c.goto(&url).await?;
        let got = wait_for("a box per operator", Duration::from_secs(30), || async {
            let got = sorted(attrs(&c, "#graph g.node[data-operator]", "data-operator").await?);
            Ok((got.len() == want.len()).then_some(got))
        })
        .await?;
        ensure!(got == want, "the graph shows {got:?}, the job has {want:?}");
        // The projection after the first temporal join runs chained into it: its edge is
        // drawn as a chain.
        let chained = attrs(&c, "#graph path.edge.chained", "data-to").await?;
        ensure!(
            !chained.is_empty() && chained.iter().all(|to| to.starts_with("project")),
            "chained edges into {chained:?}"
        );
        for node in c.find_all(Locator::Css("#graph g.node")).await? {
            let (_, _, w, h) = node.rectangle().await?;
            ensure!(w > 20.0 && h > 20.0, "a node drawn {w} x {h}");
        }
        wait_for("the job to finish", Duration::from_secs(120), || async {
            let s = c.find(Locator::Css("#job-status")).await?;
            Ok((s.attr("data-state").await?.as_deref() == Some("finished")).then_some(()))
        })
        .await?;
        ensure!(
            !c.find(Locator::Css("#stop")).await?.is_enabled().await?,
            "a finished job offers no stop"
        );
        Ok(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\nweir's stderr:\n{}", weir.stderr()));
    // Still serving its final state (said just after the status turns finished); SIGINT ends
    // the wait.
    weir.wait_for_line("the web UI stays up for 30 s", Duration::from_secs(20));
    weir.signal("INT");
    let (status, stderr) = weir.wait(Duration::from_secs(20));
    assert!(status.success(), "{status:?}\n{stderr}");
}

/// A fast generator into a sink held to 2,000 rows/s (examples/03_backpressure.rs as a job
/// file): the sink is drawn as the bottleneck, and the UI's stop button ends the run as
/// SIGTERM does.
#[tokio::test]
#[ignore = "needs Chromium: run with scripts/test"]
async fn a_rate_limited_sink_is_shown_as_the_bottleneck_and_the_stop_button_stops_the_job() {
    browser_binaries();
    use weir_connectors::generator::{GeneratorSource, GeneratorSpec};
    use weir_core::expr::{col, lit};
    use weir_runtime::{BlackholeSink, JobBuilder, JobConfig, RateLimitHandle, RateLimitedSink};

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = JobConfig {
        batch_rows: 500,
        channel_buffers: 2,
        ..Default::default()
    };
    let job = JobBuilder::with_config("backpressure", cfg);
    let events = GeneratorSpec {
        rows: None,
        ..GeneratorSpec::events(0)
    };
    job.source(
        "events",
        GeneratorSource::new(events).unwrap(),
        weir_runtime::SourceOptions::event_time("ts", 5_000),
    )
    .filter(col("key").not_eq(lit("k0")))
    .sink(
        "slow sink",
        RateLimitedSink::new(Arc::new(BlackholeSink), RateLimitHandle::new(2_000)),
    );
    let graph = job.build().unwrap();
    std::fs::write(
        d.join("job.json"),
        serde_json::to_vec_pretty(&graph.to_json()).unwrap(),
    )
    .unwrap();

    let weir = Weir::start(
        d,
        &[
            "run",
            "job.json",
            "--http",
            "127.0.0.1:0",
            "--http-linger",
            "30",
        ],
    );
    let url = weir.url.clone();
    let token = weir.token();
    with_browser("backpressure", |c| async move {
        c.goto(&url).await?;
        let bottleneck = wait_for("a bottleneck", Duration::from_secs(60), || async {
            let b = attrs(
                &c,
                "#graph g.node[data-bottleneck=\"true\"]",
                "data-operator",
            )
            .await?;
            Ok((!b.is_empty()).then_some(b))
        })
        .await?;
        ensure!(
            bottleneck == ["slow sink"],
            "the bottleneck drawn: {bottleneck:?}"
        );
        let named = c.find(Locator::Css("#bottleneck")).await?;
        ensure!(
            named.attr("data-operator").await?.as_deref() == Some("slow sink"),
            "the bottleneck named: {}",
            named.text().await?
        );
        let state = attrs(
            &c,
            "#graph g.node[data-operator=\"slow sink\"]",
            "data-state",
        )
        .await?;
        ensure!(state == ["busy"], "the sink is drawn {state:?}");
        // Opened without the token: the stop is refused once, the UI asks for the token (the
        // user reads it from the file only they can read) and sends it again.
        click_and_confirm(&c, "#stop").await?;
        give_token(&c, &token).await?;
        wait_for("the job to stop", Duration::from_secs(30), || async {
            let s = c.find(Locator::Css("#job-status")).await?;
            Ok((s.attr("data-state").await?.as_deref() == Some("stopped")).then_some(()))
        })
        .await
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\nweir's stderr:\n{}", weir.stderr()));
    // The final state was served (--http-linger); SIGINT ends the wait, not the exit code.
    weir.wait_for_line("the web UI stays up for 30 s", Duration::from_secs(10));
    weir.signal("INT");
    let (status, stderr) = weir.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(143), "{stderr}");
    assert!(
        stderr.contains("stopped through the HTTP API before the end of the input")
            && stderr.contains("rows in:"),
        "{stderr}"
    );
}

/// Two generated sources in one alignment group, one an hour ahead of the other in event
/// time: the split ahead is shown paused; "Savepoint & stop" ends the run with a savepoint
/// to go on from.
#[tokio::test]
#[ignore = "needs Chromium: run with scripts/test"]
async fn a_split_paused_by_watermark_alignment_is_shown_and_savepoint_and_stop_works() {
    browser_binaries();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let table = |name: &str, start_ms: i64| {
        format!(
            "CREATE TABLE {name} (key STRING, ts BIGINT,
               rt AS TO_TIMESTAMP_LTZ(ts, 3), WATERMARK FOR rt AS rt - INTERVAL '1' SECOND
             ) WITH ('connector' = 'weir-generator', 'generator.scenario' = 'events',
                     'generator.rate' = '1000', 'generator.start-ms' = '{start_ms}',
                     'scan.watermark.alignment.group' = 'replay',
                     'scan.watermark.alignment.max-drift' = '10 s',
                     'scan.watermark.alignment.update-interval' = '100 ms');
             CREATE TABLE {name}_out (ts BIGINT, key STRING)
             WITH ('connector' = 'filesystem', 'path' = '{name}_out', 'format' = 'csv');
             INSERT INTO {name}_out SELECT ts, key FROM {name};\n"
        )
    };
    let start = 1_704_067_200_000i64;
    // A window count keeps state, so the checkpoints have an operator's part to show.
    let job = format!(
        "SET 'execution.checkpointing.interval' = '1 s';
         SET 'execution.checkpointing.dir' = 'checkpoints';
         {}{}
         CREATE TABLE counts (window_start TIMESTAMP(3), n BIGINT)
         WITH ('connector' = 'filesystem', 'path' = 'counts', 'format' = 'csv');
         INSERT INTO counts SELECT window_start, COUNT(*)
         FROM TABLE(TUMBLE(TABLE behind, DESCRIPTOR(rt), INTERVAL '10' SECOND))
         GROUP BY window_start, window_end;\n",
        table("behind", start),
        table("ahead", start + 3_600_000)
    );
    std::fs::write(d.join("job.sql"), job).unwrap();

    let weir = Weir::start(
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
    // Opened through a link carrying the token in its fragment, which the page then drops
    // from its address.
    let url = format!("{}#token={}", weir.url, weir.token());
    with_browser("alignment", |c| async move {
        c.goto(&url).await?;
        let shown = c.current_url().await?;
        ensure!(
            !shown.as_str().contains("token"),
            "the address shows {shown}"
        );
        // One reading of the page: the paused and the reading splits, and the alerts.
        let (paused, reading, alert) = wait_for(
            "a paused split and its alert",
            Duration::from_secs(60),
            || async {
                let p = attrs(&c, "#splits tbody tr[data-paused=\"true\"]", "data-source").await?;
                if p.is_empty() {
                    return Ok(None);
                }
                let r = attrs(&c, "#splits tbody tr[data-paused=\"false\"]", "data-source").await?;
                let a = c.find(Locator::Css("#alerts")).await?.text().await?;
                Ok(a.contains("paused by watermark alignment")
                    .then_some((p, r, a)))
            },
        )
        .await?;
        ensure!(
            paused.iter().all(|s| s.contains("ahead")),
            "paused: {paused:?}"
        );
        ensure!(
            reading.iter().any(|s| s.contains("behind")),
            "reading: {reading:?}"
        );
        ensure!(
            alert.contains("paused by watermark alignment"),
            "alerts: {alert}"
        );
        // Each operator's part in the last checkpoint: the window count's state in bytes.
        let parts = wait_for(
            "the operators' parts in a checkpoint",
            Duration::from_secs(60),
            || async {
                let ops = attrs(&c, "#checkpoint-operators tbody tr", "data-operator").await?;
                let bytes = attrs(&c, "#checkpoint-operators tbody tr", "data-bytes").await?;
                let parts: Vec<(String, u64)> = (ops.into_iter())
                    .zip(bytes.iter().map(|b| b.parse().unwrap_or(0)))
                    .collect();
                Ok(parts.iter().any(|(_, b)| *b > 0).then_some(parts))
            },
        )
        .await?;
        ensure!(
            parts
                .iter()
                .any(|(op, b)| op.contains("aggregate") && *b > 0),
            "operators' parts: {parts:?}"
        );
        click_and_confirm(&c, "#savepoint-stop").await?;
        wait_for("the job to stop", Duration::from_secs(60), || async {
            let s = c.find(Locator::Css("#job-status")).await?;
            Ok((s.attr("data-state").await?.as_deref() == Some("stopped")).then_some(()))
        })
        .await
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\nweir's stderr:\n{}", weir.stderr()));
    // The final state was served (--http-linger); SIGINT ends the wait, not the exit code.
    weir.wait_for_line("the web UI stays up for 30 s", Duration::from_secs(10));
    weir.signal("INT");
    let (status, stderr) = weir.wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{stderr}");
    let savepoint = stderr
        .lines()
        .find_map(|l| l.strip_prefix("go on from it with: weir run ... --from-savepoint "))
        .unwrap_or_else(|| panic!("no savepoint in: {stderr}"));
    assert!(
        stderr.contains("stopped through the HTTP API with a savepoint"),
        "{stderr}"
    );
    assert!(d.join(savepoint).is_dir(), "{savepoint}");
}

/// `weir backfill` (#20): the page shows how far through its range the backfill is, with its
/// pace, and "caught up" with a full bar once it has read to the end of the range.
#[tokio::test]
#[ignore = "needs Chromium: run with scripts/test"]
async fn a_backfill_shows_its_progress_through_its_range() {
    browser_binaries();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("job.sql"),
        "CREATE TABLE events (key STRING, ts BIGINT, rt AS TO_TIMESTAMP_LTZ(ts, 3),
           WATERMARK FOR rt AS rt - INTERVAL '5' SECOND
         ) WITH ('connector' = 'weir-generator', 'generator.scenario' = 'events',
                 'generator.rows' = '20000');
         CREATE TABLE copied (key STRING, ts BIGINT)
         WITH ('connector' = 'filesystem', 'path' = 'copied.csv', 'format' = 'csv');
         INSERT INTO copied SELECT key, ts FROM events;",
    )
    .unwrap();
    let weir = Weir::start(
        d,
        &[
            "backfill",
            "job.sql",
            "--from",
            "2023-12-31T23:59:00Z",
            "--until",
            "2024-01-01T00:01:00Z",
            "--suffix",
            "_v2",
            "--rate",
            "4000",
            "--http",
            "127.0.0.1:0",
            "--http-linger",
            "30",
        ],
    );
    let url = weir.url.clone();
    with_browser("backfill", |c| async move {
        c.goto(&url).await?;
        let first = wait_for(
            "the backfill's progress",
            Duration::from_secs(60),
            || async {
                let b = c.find(Locator::Css("#backfill")).await?;
                Ok(b.is_displayed().await?.then_some(()))
            },
        )
        .await;
        first?;
        let text = c.find(Locator::Css("#backfill-text")).await?.text().await?;
        ensure!(
            text.starts_with("Backfill 2023-12-31 23:59:00 .. 2024-01-01 00:01:00: ")
                && text.contains("% done")
                && text.contains("rows/s"),
            "the progress reads {text:?}"
        );
        let (text, width) = wait_for("the end of the range", Duration::from_secs(60), || async {
            let b = c.find(Locator::Css("#backfill")).await?;
            if b.attr("data-caught-up").await?.as_deref() != Some("true") {
                return Ok(None);
            }
            let text = c.find(Locator::Css("#backfill-text")).await?.text().await?;
            let bar = c.find(Locator::Css("#backfill-done")).await?;
            Ok(Some((text, bar.css_value("width").await?)))
        })
        .await?;
        ensure!(
            text.contains("100 % done") && text.contains("caught up"),
            "at the end the progress reads {text:?}"
        );
        let full = c
            .find(Locator::Css(".range-bar"))
            .await?
            .css_value("width")
            .await?;
        ensure!(width == full, "the bar is {width} of {full}");
        Ok(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\nweir's stderr:\n{}", weir.stderr()));
    // Caught up means written: the job has ended by then, and SIGINT ends the linger.
    weir.wait_for_line("the web UI stays up for 30 s", Duration::from_secs(10));
    weir.signal("INT");
    let (_, stderr) = weir.wait(Duration::from_secs(30));
    assert!(
        stderr.contains("rows out:       20000") && !stderr.contains("before the end of the input"),
        "{stderr}"
    );
}
