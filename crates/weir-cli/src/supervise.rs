//! Runs a job with a progress bar and periodic metrics, and summarises it.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use weir_core::SystemClock;
use weir_http::{JobActions, JobStatus, JobView};
use weir_runtime::exec::{self, JobReport};
use weir_runtime::JobGraph;

/// What stopped a job, once known: the first of the signals and API requests wins.
type StoppedByCell = Arc<Mutex<Option<StoppedBy>>>;

fn stopped_by_first(cell: &StoppedByCell, by: StoppedBy) {
    cell.lock().expect("stop cause lock").get_or_insert(by);
}

/// What the progress bar shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    Off,
    /// Bytes or rows read of bounded inputs.
    Input,
    /// A backfill's event time: the sources' watermark within the range (to now without an
    /// end), rows per second, the time left, and when it has caught up.
    Range(weir_runtime::backfill::BackfillRange),
}

/// The process's SIGTERM, SIGINT and SIGUSR1 listeners, on the control runtime (the job's own
/// runtime may be too busy to hear them). One set, installed before the job starts, serves
/// every run of a job, the waits between runs, a group member's life and the web UI's linger
/// after the end: tokio's handlers take the place of the default (dying) for good, so a signal
/// that came between one listener and the next would be lost, and the process would go on as
/// if none came.
pub struct Listeners {
    signals: Arc<tokio::sync::Mutex<Signals>>,
    /// What asked the last run to stop (a signal, the HTTP API), when it failed on the way:
    /// a job asked to stop is not restarted.
    stopping: Mutex<Option<StoppedBy>>,
}

pub struct Signals {
    pub term: tokio::signal::unix::Signal,
    pub int: tokio::signal::unix::Signal,
    pub usr1: tokio::signal::unix::Signal,
}

impl Listeners {
    pub fn install() -> Result<Listeners> {
        use tokio::signal::unix::{signal, SignalKind};
        let _in_control = crate::control::handle().enter();
        let signals = Signals {
            term: signal(SignalKind::terminate()).context("installing a SIGTERM handler")?,
            int: signal(SignalKind::interrupt()).context("installing a SIGINT handler")?,
            usr1: signal(SignalKind::user_defined1()).context("installing a SIGUSR1 handler")?,
        };
        Ok(Listeners {
            signals: Arc::new(tokio::sync::Mutex::new(signals)),
            stopping: Mutex::default(),
        })
    }

    /// The listeners, for as long as the guard is held (one holder at a time).
    pub async fn lock(&self) -> tokio::sync::MutexGuard<'_, Signals> {
        self.signals.lock().await
    }

    /// Waits `at_most` after the job has ended (the web UI lingering); SIGTERM or SIGINT ends
    /// the wait early. SIGUSR1 is answered that the job has ended.
    pub async fn linger(&self, at_most: Duration) {
        self.wait(at_most, "the job has ended").await;
    }

    /// Waits `delay` for a restart; SIGTERM or SIGINT ends the wait early with that signal.
    /// SIGUSR1 is answered that there is no job to take a savepoint of.
    async fn wait_to_restart(&self, delay: Duration) -> Option<Signal> {
        let why = "the job is waiting to restart after a failure; its newest checkpoint is \
                   where it goes on";
        self.wait(delay, why).await
    }

    /// Waits `at_most` while no job runs: the SIGTERM or SIGINT that ends it early, or `None`;
    /// SIGUSR1 (a savepoint) is answered with `no_job` (why there is none to take).
    async fn wait(&self, at_most: Duration, no_job: &str) -> Option<Signal> {
        let mut signals = self.signals.lock().await;
        let Signals { term, int, usr1 } = &mut *signals;
        let sleep = tokio::time::sleep(at_most);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                // A signal that came as the wait ended still counts.
                biased;
                _ = term.recv() => return Some(Signal::Term),
                _ = int.recv() => return Some(Signal::Int),
                _ = usr1.recv() => eprintln!("weir: no savepoint: {no_job}"),
                () = &mut sleep => return None,
            }
        }
    }
}

/// Runs `graph` to the end; shows progress when `progress` asks and stderr is a
/// terminal; writes metrics to `metrics_out` and publishes them to `view` (the HTTP server's)
/// every second and at the end. The view's actions are this job's savepoint and stop.
pub async fn run(
    graph: JobGraph,
    metrics_out: Option<&Path>,
    progress: Progress,
    view: Option<&Arc<JobView>>,
) -> Result<Supervised> {
    // Installed before the job starts, so that a signal from the first moment on stops it
    // cleanly.
    let listeners = Listeners::install()?;
    run_listening(graph, metrics_out, progress, view, &listeners).await
}

/// [`run`] with the process's `listeners`.
async fn run_listening(
    graph: JobGraph,
    metrics_out: Option<&Path>,
    progress: Progress,
    view: Option<&Arc<JobView>>,
    listeners: &Listeners,
) -> Result<Supervised> {
    let sinks: Vec<(String, String)> = (graph.nodes.iter())
        .filter_map(|n| match &n.kind {
            weir_runtime::graph::NodeKind::Sink { factory } => {
                Some((n.name.clone(), factory.kind().to_string()))
            }
            _ => None,
        })
        .collect();
    let control = crate::control::handle();
    let checkpointing = graph.config.checkpointing.is_some();
    let slo_ms = graph
        .config
        .slo_time_lag_ms
        .unwrap_or(weir_http::CAUGHT_UP_MS);
    let job = exec::start(graph, Arc::new(SystemClock))?;
    let stop = job.stop_handle();
    let savepoints = job.savepoint_handle();
    let stopped_by: StoppedByCell = Arc::default();
    if let Some(view) = view {
        view.set_actions(api_actions(
            &stop,
            checkpointing.then(|| savepoints.clone()),
            &stopped_by,
        ));
    }
    // What stopped the job is known before the stop takes effect.
    let signals = {
        let stopped_by = stopped_by.clone();
        let signals = listeners.signals.clone();
        control.spawn(async move {
            let mut signals = signals.lock_owned().await;
            let Signals { term, int, usr1 } = &mut *signals;
            let mut signalled = false;
            loop {
                let which = tokio::select! {
                    _ = term.recv() => Signal::Term,
                    _ = int.recv() => Signal::Int,
                    _ = usr1.recv() => {
                        // A savepoint, and the job goes on.
                        let s = savepoints.clone();
                        tokio::spawn(async move {
                            match s.take(false).await {
                                Ok(p) => eprintln!("weir: savepoint written to {}", p.display()),
                                Err(e) => eprintln!("weir: no savepoint: {e}"),
                            }
                        });
                        continue;
                    }
                };
                if std::mem::replace(&mut signalled, true) {
                    // A second signal: whatever the first is waiting on (a savepoint behind a
                    // locked table, a sink blocked on a stalled pipe), stop now.
                    eprintln!(
                        "weir: {} again: stopping at once (exit {}); what the sinks have not \
                         published stays unpublished",
                        which.name(),
                        which.exit_code()
                    );
                    std::process::exit(which.exit_code());
                }
                stopped_by_first(&stopped_by, StoppedBy::Signal(which));
                if which == Signal::Term && checkpointing {
                    // Stop with a savepoint: the job goes on from it with --from-savepoint.
                    // Taken aside, so a second signal is still heard while it is written.
                    let (savepoints, stop) = (savepoints.clone(), stop.clone());
                    tokio::spawn(async move {
                        if let Err(e) = savepoints.take(true).await {
                            eprintln!("weir: no savepoint, stopping without one: {e}");
                            stop.stop();
                        }
                    });
                    continue;
                }
                stop.stop();
            }
        })
    };
    let metrics = job.metrics.clone();
    let mut reporter = job.reporter();
    let started = job.started;
    let bar = (progress != Progress::Off).then(|| {
        let b = indicatif::ProgressBar::new(0);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {wide_bar} {percent}% {msg}",
            )
            .expect("a valid template"),
        );
        b
    });
    let out = metrics_out.map(Path::to_path_buf);
    let watcher = {
        let bar = bar.clone();
        let view = view.cloned();
        tokio::spawn(async move {
            let mut tick = 0u64;
            let mut pace = weir_runtime::backfill::RangePace::default();
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                tick += 1;
                if let (Some(bar), Progress::Range(range)) = (&bar, progress) {
                    range_progress(bar, &metrics, range, slo_ms, &mut pace);
                } else if let Some(bar) = &bar {
                    let (mut done, mut total, mut rows) = (0, 0, 0);
                    for n in &metrics.nodes {
                        for s in n.splits.lock().expect("metrics lock").iter() {
                            done += s.progress_done.load(Relaxed);
                            total += s.progress_total.load(Relaxed);
                            rows += s.rows_read.load(Relaxed);
                        }
                    }
                    if total > 0 {
                        bar.set_length(total);
                        bar.set_position(done.min(total));
                    }
                    bar.set_message(format!("{rows} rows read"));
                }
                if tick.is_multiple_of(10) && (out.is_some() || view.is_some()) {
                    let snap = reporter.sample(started);
                    if let Some(path) = &out {
                        if let Ok(json) = serde_json::to_vec_pretty(&snap) {
                            let _ = std::fs::write(path, json);
                        }
                    }
                    if let Some(view) = &view {
                        view.publish(snap);
                    }
                }
            }
        })
    };
    let result = job.wait().await;
    watcher.abort();
    signals.abort();
    // Ended, so the listeners are free for the wait to restart and the next run.
    let _ = signals.await;
    let stopped_by = *stopped_by.lock().expect("stop cause lock");
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if let Some(view) = view {
        // The job's handles act on nothing now (a restarted job brings its own).
        view.set_actions(JobActions::new());
        if let Ok(report) = &result {
            view.publish(report.metrics.clone());
        }
    }
    if result.is_err() {
        *listeners.stopping.lock().expect("stop cause lock") = stopped_by;
    }
    let report = result?;
    if let Some(path) = metrics_out {
        std::fs::write(path, serde_json::to_vec_pretty(&report.metrics)?)
            .with_context(|| format!("writing metrics to {}", path.display()))?;
    }
    // A signal or request that came after the job completed stopped nothing.
    let stopped_by = stopped_by.filter(|_| report.stopped);
    Ok(Supervised {
        report,
        stopped_by,
        restarts: 0,
        sinks,
    })
}

/// The HTTP API's actions on a job: a stop (as SIGINT or SIGTERM without checkpoints: the
/// summary and exit code 143) and, with checkpoints, savepoints (with `stop`, as SIGTERM with
/// checkpoints: exit code 0 and the savepoint to go on from).
fn api_actions(
    stop: &exec::StopHandle,
    savepoints: Option<exec::SavepointHandle>,
    stopped_by: &StoppedByCell,
) -> JobActions {
    let actions = JobActions::new().on_stop({
        let stop = stop.clone();
        let stopped_by = stopped_by.clone();
        move || {
            stopped_by_first(&stopped_by, StoppedBy::HttpApi);
            stop.stop();
        }
    });
    let Some(savepoints) = savepoints else {
        return actions;
    };
    let stopped_by = stopped_by.clone();
    actions.on_savepoint(move |then_stop| {
        let savepoints = savepoints.clone();
        let stopped_by = stopped_by.clone();
        async move {
            // Known before the job stops, as a signal's is.
            let mine = then_stop && {
                let mut by = stopped_by.lock().expect("stop cause lock");
                let first = by.is_none();
                by.get_or_insert(StoppedBy::HttpApi);
                first
            };
            let result = savepoints.take(then_stop).await;
            if result.is_err() && mine {
                // No savepoint, so no stop: a later signal says what stopped the job.
                *stopped_by.lock().expect("stop cause lock") = None;
            }
            result.map_err(|e| e.to_string())
        }
    })
}

/// [`run`] again from the newest checkpoint after a failure while running, as the job's
/// restart strategy says (only with checkpoints: without, there is nothing to go on from).
/// Failures that would happen again (a refused plan, a bad setting, a bad record with the
/// `fail` policy, too many dead letters) are not restarted. `view` follows every run and gets
/// the status: restarting after a failure, and finished, stopped or failed at the end.
/// `listeners` serve every run and every wait between them.
pub async fn run_restarting(
    mut graph: JobGraph,
    metrics_out: Option<&Path>,
    progress: Progress,
    view: Option<&Arc<JobView>>,
    listeners: &Listeners,
) -> Result<Supervised> {
    let strategy = graph.config.checkpointing.as_ref().map(|c| c.restart);
    let mut restarts = 0;
    let set_status = |status: JobStatus| {
        if let Some(view) = view {
            view.set_status(status);
        }
    };
    loop {
        match run_listening(graph.clone(), metrics_out, progress, view, listeners).await {
            Ok(mut s) => {
                s.restarts = restarts;
                set_status(if s.report.stopped {
                    JobStatus::Stopped
                } else {
                    JobStatus::Finished
                });
                return Ok(s);
            }
            Err(e) => {
                let again = e
                    .downcast_ref::<weir_runtime::Error>()
                    .is_some_and(weir_runtime::Error::may_pass_on_restart);
                let delay = strategy
                    .filter(|_| again)
                    .and_then(|s| s.delay_before(restarts + 1));
                // A job that was asked to stop and failed on the way is not restarted.
                let stopping = listeners.stopping.lock().expect("stop cause lock").take();
                let restart = delay.filter(|_| stopping.is_none());
                let Some(delay) = restart else {
                    let e = if let (Some(by), Some(_)) = (stopping, delay) {
                        e.context(format!(
                            "the job failed while stopping (asked {}), so it is not restarted; \
                             the newest checkpoint is where --restore latest goes on",
                            by.how()
                        ))
                    } else if restarts > 0 {
                        e.context(format!(
                            "the job failed again after {restarts} restart{} from its checkpoints",
                            if restarts == 1 { "" } else { "s" }
                        ))
                    } else {
                        e
                    };
                    set_status(JobStatus::Failed {
                        error: format!("{e:#}"),
                    });
                    return Err(e);
                };
                restarts += 1;
                eprintln!(
                    "weir: the job failed: {e:#}\nweir: restart {restarts} from the newest checkpoint in {} ms",
                    delay.as_millis()
                );
                set_status(JobStatus::Restarting {
                    restarts,
                    error: format!("{e:#}"),
                });
                // The wait is the job's too: a signal during it stops the job.
                if let Some(s) = listeners.wait_to_restart(delay).await {
                    set_status(JobStatus::Stopped);
                    eprintln!(
                        "weir: stopped by signal ({}) while waiting to restart after a failure; \
                         the newest checkpoint is where --restore latest goes on",
                        s.name()
                    );
                    std::process::exit(s.exit_code());
                }
                let name = graph.name.clone();
                if let Some(c) = graph.config.checkpointing.as_mut() {
                    // From the newest checkpoint this job wrote; until it has written one, from
                    // what it started from (a checkpoint or savepoint given by its path, which
                    // may be another job's).
                    match own_checkpoint(&c.dir, &name) {
                        Ok(true) => c.restore = Some("latest".into()),
                        Ok(false) => {}
                        // Cannot tell (a store out of reach for a moment): `latest` rather than
                        // start over from nothing, which would write the output again; a
                        // checkpoint or savepoint it started from stays.
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot read the newest checkpoint");
                            if c.restore.is_none() {
                                c.restore = Some("latest".into());
                            }
                        }
                    }
                }
            }
        }
    }
}

/// What the job has written, in event time (see `MetricsSnapshot::sinks_watermark`).
fn sinks_watermark(metrics: &weir_runtime::metrics::JobMetrics) -> Option<i64> {
    weir_runtime::metrics::least_watermark(
        (metrics.nodes.iter())
            .filter(|n| n.kind.starts_with("sink"))
            .flat_map(|n| n.subtasks.iter())
            .map(|s| match s.finished.load(Relaxed) {
                true => Some(i64::MAX),
                false => Some(s.watermark.load(Relaxed)).filter(|w| *w != i64::MIN),
            }),
    )
}

/// Shows a backfill's progress on `bar` (see [`weir_runtime::backfill::RangePace`]): the event
/// time its sinks have reached within the range, rows per second, the time left at that pace in event time,
/// and "caught up" once an open-ended backfill's watermark is within `slo_ms` of now.
fn range_progress(
    bar: &indicatif::ProgressBar,
    metrics: &weir_runtime::metrics::JobMetrics,
    range: weir_runtime::backfill::BackfillRange,
    slo_ms: i64,
    pace: &mut weir_runtime::backfill::RangePace,
) {
    use weir_core::time::Clock;
    let now_ms = SystemClock.now().0;
    let rows: u64 = (metrics.nodes.iter())
        .flat_map(|n| {
            let splits = n.splits.lock().expect("metrics lock");
            splits
                .iter()
                .map(|s| s.rows_read.load(Relaxed))
                .collect::<Vec<_>>()
        })
        .sum();
    let p = pace.sample(&range, now_ms, sinks_watermark(metrics), rows, slo_ms);
    let span = range
        .until_ms
        .unwrap_or(now_ms)
        .saturating_sub(range.from_ms)
        .max(1);
    bar.set_length(span as u64);
    bar.set_position((p.done * span as f64) as u64);
    let left = match p.time_left_ms {
        _ if p.caught_up => "caught up".to_string(),
        Some(ms) => format!("about {} left", hms(ms)),
        None => "time left unknown".to_string(),
    };
    bar.set_message(format!(
        "event time {} of {}..{}, {rows} rows read, {:.0} rows/s, {left}",
        p.watermark
            .filter(|w| *w != i64::MAX)
            .map_or("none yet".to_string(), weir_core::time::format_utc),
        weir_core::time::format_utc(range.from_ms),
        range
            .until_ms
            .map_or("now".to_string(), weir_core::time::format_utc),
        p.rows_per_s,
    ));
}

/// `ms` as hours, minutes and seconds: `0h10m00s`.
pub fn hms(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    format!("{}h{:02}m{:02}s", s / 3600, s / 60 % 60, s % 60)
}

/// Whether the checkpoint a restore of `latest` in `dir` takes (the newest good one, see
/// `CheckpointStorage::latest_good`) is one job `name` wrote.
fn own_checkpoint(dir: &Path, name: &str) -> weir_state::Result<bool> {
    let good = weir_state::checkpoint::storage_at(dir)?.latest_good()?;
    Ok(good.is_some_and(|g| g.manifest.job == name))
}

/// A signal that stopped a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGINT (Ctrl-C): exit code 130.
    Int,
    /// SIGTERM: exit code 143.
    Term,
}

impl Signal {
    pub fn exit_code(self) -> i32 {
        match self {
            Signal::Int => 130,
            Signal::Term => 143,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Signal::Int => "SIGINT",
            Signal::Term => "SIGTERM",
        }
    }
}

/// What stopped a job before the end of its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoppedBy {
    Signal(Signal),
    /// `POST /api/v1/stop`, or a savepoint with stop: as SIGTERM (exit code 143; 0 with a
    /// savepoint).
    HttpApi,
}

impl StoppedBy {
    pub fn exit_code(self) -> i32 {
        match self {
            StoppedBy::Signal(s) => s.exit_code(),
            StoppedBy::HttpApi => Signal::Term.exit_code(),
        }
    }

    /// `by signal (SIGTERM)`, `through the HTTP API`.
    pub fn how(self) -> String {
        match self {
            StoppedBy::Signal(s) => format!("by signal ({})", s.name()),
            StoppedBy::HttpApi => "through the HTTP API".into(),
        }
    }
}

/// How a supervised run ended: its report, and what stopped it, if something did.
pub struct Supervised {
    pub report: JobReport,
    pub stopped_by: Option<StoppedBy>,
    /// How often the job was restarted from a checkpoint after a failure.
    pub restarts: u32,
    /// (name, kind) of every sink.
    sinks: Vec<(String, String)>,
}

impl Supervised {
    /// The report of a job that ran to its end; a stopped job's summary is printed and the
    /// process exits (see [`Supervised::ended`]).
    pub fn finished(self) -> JobReport {
        let (report, exit_code) = self.ended();
        if let Some(code) = exit_code {
            std::process::exit(code);
        }
        report
    }

    /// The report, and the exit code when the job was stopped before the end of its input:
    /// then its summary is printed here with what became of each sink's output, and the code
    /// is 130 (SIGINT), 143 (SIGTERM, the HTTP API's stop) or 0 (stopped with a savepoint).
    pub fn ended(self) -> (JobReport, Option<i32>) {
        if self.restarts > 0 {
            eprintln!(
                "restarts:       {} after failures, each from the newest checkpoint",
                self.restarts
            );
        }
        let Some(by) = self.stopped_by else {
            return (self.report, None);
        };
        if let Some(p) = &self.report.savepoint {
            eprint!("{}", summary(&self.report));
            eprintln!(
                "stopped {} with a savepoint: {}\ngo on from it with: weir run ... --from-savepoint {}",
                by.how(),
                p.display(),
                p.display()
            );
            return (self.report, Some(0));
        }
        eprint!("{}", summary(&self.report));
        eprintln!("stopped {} before the end of the input", by.how());
        eprint!("{}", stopped_sinks(&self.sinks));
        (self.report, Some(by.exit_code()))
    }
}

/// What a stop did to each sink's output: a file sink keeps its previous file and discards
/// the incomplete one; other sinks keep what they wrote.
fn stopped_sinks(sinks: &[(String, String)]) -> String {
    let mut s = String::new();
    for (name, kind) in sinks {
        let what = match kind.as_str() {
            "file" => {
                "incomplete output discarded; a file written by an earlier run is kept as it was"
            }
            "blackhole" => "nothing kept",
            "collect" => "the rows written so far are kept in memory",
            _ => "rows written before the stop stay where they were written",
        };
        let _ = writeln!(s, "sink `{name}` ({kind}): {what}");
    }
    s
}

/// A few lines on how the job went.
pub fn summary(r: &JobReport) -> String {
    let m = &r.metrics;
    let secs = (r.elapsed_ms.max(1)) as f64 / 1000.0;
    let rows_in: u64 = m
        .nodes
        .iter()
        .filter(|n| n.kind.starts_with("source"))
        .map(|n| n.rows_out)
        .sum();
    let rows_out: u64 = m
        .nodes
        .iter()
        .filter(|n| n.kind.starts_with("sink"))
        .map(|n| n.rows_in)
        .sum();
    let late_split: u64 = m
        .nodes
        .iter()
        .flat_map(|n| &n.splits)
        .map(|s| s.late_rows)
        .sum();
    let late_dropped: u64 = m.nodes.iter().map(|n| n.late_rows).sum();
    let peak_state_rows: u64 = m.nodes.iter().map(|n| n.peak_state_rows).sum();
    let peak_state_bytes: u64 = m.nodes.iter().map(|n| n.peak_state_bytes).sum();
    let mut s = String::new();
    let _ = writeln!(s, "rows in:        {rows_in}");
    let _ = writeln!(s, "rows out:       {rows_out}");
    let _ = writeln!(s, "late rows:      {late_split} behind their split's watermark, {late_dropped} set aside by operators");
    let records: u64 = m
        .nodes
        .iter()
        .flat_map(|n| &n.splits)
        .map(|s| s.rows_read)
        .sum::<u64>()
        + r.dead_letters;
    let _ = writeln!(
        s,
        "dead letters:   {} ({:.2} % of the {records} records read)",
        r.dead_letters,
        100.0 * r.dead_letters as f64 / records.max(1) as f64
    );
    let _ = writeln!(
        s,
        "peak state:     {peak_state_rows} rows, {:.1} MiB",
        peak_state_bytes as f64 / (1 << 20) as f64
    );
    let rss = crate::procstat::peak_rss_bytes();
    if rss > 0 {
        let _ = writeln!(
            s,
            "peak RSS:       {:.1} MiB (the process so far)",
            rss as f64 / (1 << 20) as f64
        );
    }
    let _ = writeln!(
        s,
        "in flight:      at most {} rows (sum of channel peaks; bound {})",
        m.peak_in_flight_rows, m.in_flight_bound_rows
    );
    let _ = writeln!(
        s,
        "elapsed:        {secs:.3} s, {:.0} rows/s in",
        rows_in as f64 / secs
    );
    if let Some((epoch, at, splits)) = &r.restored {
        let _ = writeln!(
            s,
            "restored:       checkpoint {epoch} ({}), {splits} source splits taken up where they stood",
            at.display()
        );
    }
    if m.checkpoints.completed > 0 {
        let _ = writeln!(
            s,
            "checkpoints:    {} complete, the last #{} took {} ms (longest {} ms), {} bytes of state \
             ({} written by it, the rest shared with earlier checkpoints); operators were held up \
             at most {} ms taking a snapshot (the last: {} ms, then {} ms writing it beside the \
             job), and aligning barriers at most {} ms",
            m.checkpoints.completed,
            m.checkpoints.last_id,
            m.checkpoints.last_duration_ms,
            m.checkpoints.max_duration_ms,
            m.checkpoints.last_bytes,
            m.checkpoints.last_written_bytes,
            m.checkpoints.max_sync_ms,
            m.checkpoints.last_sync_ms,
            m.checkpoints.last_async_ms,
            m.checkpoints.max_alignment_ms
        );
        // The operators that keep state (a stateless one's part is its alignment, above).
        for n in &m.nodes {
            let Some(c) = n.checkpoint.filter(|c| c.last_bytes > 0) else {
                continue;
            };
            let _ = writeln!(
                s,
                "  state of `{}`{}: {} bytes in checkpoint #{} ({} written by it); its \
                 subtasks held up at most {} ms taking a snapshot and {} ms writing one",
                n.name,
                if n.state_on_disk { " (on disk)" } else { "" },
                c.last_bytes,
                c.last_id,
                c.last_written_bytes,
                c.max_sync_ms,
                c.max_async_ms
            );
        }
    }
    for n in m.nodes.iter().filter(|n| n.spread_alerts > 0) {
        let _ = writeln!(
            s,
            "ALERT:          the inputs of `{}` drifted up to {:.0} s apart in event time ({} times \
             above the threshold): one input is replaying or stalled",
            n.name,
            n.peak_event_time_spread_ms.unwrap_or(0) as f64 / 1000.0,
            n.spread_alerts
        );
    }
    for n in m.nodes.iter().filter(|n| n.split_spread_alerts > 0) {
        let _ = writeln!(
            s,
            "ALERT:          the splits of source `{}` drifted up to {:.0} s apart in watermark \
             ({} times above the threshold): one split is replaying or stalled behind the others",
            n.name,
            n.peak_split_spread_ms.unwrap_or(0) as f64 / 1000.0,
            n.split_spread_alerts
        );
    }
    if let Some(slo) = m.slo.filter(|s| s.breaches > 0) {
        let _ = writeln!(
            s,
            "ALERT:          time lag beyond the objective of {:.0} s ({} breaches, {} s of \
             samples; worst {:.0} s): weir.slo.time-lag",
            slo.time_lag_ms as f64 / 1000.0,
            slo.breaches,
            slo.breaching_samples,
            slo.worst_time_lag_ms as f64 / 1000.0
        );
    } else if let Some(slo) = m.slo {
        let _ = writeln!(
            s,
            "time lag:       within the objective of {:.0} s (worst {:.0} s)",
            slo.time_lag_ms as f64 / 1000.0,
            slo.worst_time_lag_ms as f64 / 1000.0
        );
    }
    for x in &m.hot_keys {
        if let Some(k) = x.top.first().filter(|k| k.share >= 0.2) {
            let _ = writeln!(
                s,
                "hot key:        `{}` is {:.0} % of the rows from `{}` to `{}`",
                k.key,
                k.share * 100.0,
                x.from,
                x.to
            );
        }
    }
    s
}
