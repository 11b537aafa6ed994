//! `weir cutover`: readers switched from the live job's table to the backfill's, by re-pointing
//! the view they read, once the backfill has caught up and its output validates; and back
//! with `--rollback`.
//!
//! Caught up means the candidate job's watermark is at or past the live job's, each read from
//! the job's HTTP API (`--live-http`: with checkpoints, the least split watermark of its newest
//! completed checkpoint, which its committed output has reached; without, its sources') or its
//! newest complete checkpoint (`--live-checkpoints`, the least watermark of its splits). Then,
//! unless `--no-validate`, `weir validate` compares what the view shows now with the candidate
//! table (with its options: `--key`, `--tolerance`, `--range`); a difference stops the cutover.
//! The view is re-pointed and the cutover recorded in `weir_cutovers` in one transaction.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use weir_core::time::Clock;

/// What `weir cutover` takes.
#[derive(clap::Args, Debug)]
pub struct CutoverArgs {
    /// The database: `jdbc:postgresql://host:port/db` or `jdbc:sqlite:path`.
    #[arg(long)]
    pub url: String,
    #[arg(long)]
    pub username: Option<String>,
    /// The environment variable holding the database password.
    #[arg(long)]
    pub password_env: Option<String>,
    /// The view readers read (created at the first cutover).
    #[arg(long)]
    pub view: String,
    /// The table to point it at: the backfill's output.
    #[arg(long, required_unless_present = "rollback")]
    pub to: Option<String>,
    /// Point the view back at the table it read before the last cutover.
    #[arg(long, conflicts_with = "to")]
    pub rollback: bool,
    /// The live job's checkpoint folder, for its watermark.
    #[arg(long)]
    pub live_checkpoints: Option<PathBuf>,
    /// The live job's HTTP address (host:port), for its watermark.
    #[arg(long, conflicts_with = "live_checkpoints")]
    pub live_http: Option<String>,
    /// The backfill's checkpoint folder, for its watermark.
    #[arg(long)]
    pub candidate_checkpoints: Option<PathBuf>,
    /// The backfill's HTTP address (host:port), for its watermark.
    #[arg(long, conflicts_with = "candidate_checkpoints")]
    pub candidate_http: Option<String>,
    /// Switch without comparing the jobs' watermarks (recorded as such).
    #[arg(long)]
    pub skip_caught_up_check: bool,
    /// Switch without comparing the tables (recorded as such).
    #[arg(long)]
    pub no_validate: bool,
    /// As `weir validate --key`.
    #[arg(long, value_delimiter = ',')]
    pub key: Vec<String>,
    /// As `weir validate --tolerance`.
    #[arg(long = "tolerance", value_parser = crate::validate::parse_tolerance)]
    pub tolerance: Vec<(String, f64)>,
    /// As `weir validate --range`: the range both jobs covered.
    #[arg(long, requires = "time_column")]
    pub range: Option<String>,
    /// As `weir validate --time-column`.
    #[arg(long)]
    pub time_column: Option<String>,
}

fn options(a: &CutoverArgs, table: &str) -> Result<weir_jdbc::JdbcOptions> {
    crate::validate::jdbc_options(&a.url, table, &a.username, &a.password_env)
}

/// A job's watermark from its checkpoints or HTTP API, and where it came from.
fn watermark(
    checkpoints: &Option<PathBuf>,
    http: &Option<String>,
    which: &str,
) -> Result<Option<(i64, String)>> {
    if let Some(dir) = checkpoints {
        let storage = weir_state::checkpoint::storage_at(dir)?;
        let handle = storage
            .latest()?
            .with_context(|| format!("{which}: no complete checkpoint in {}", dir.display()))?;
        let m = storage.read_manifest(&handle)?;
        let w = m.least_watermark().with_context(|| {
            format!("{which}: checkpoint {} records no source split", m.epoch.0)
        })?;
        return Ok(Some((
            w,
            format!(
                "checkpoint {} of job `{}` in {}",
                m.epoch.0,
                m.job,
                dir.display()
            ),
        )));
    }
    if let Some(addr) = http {
        let job = crate::top::get(addr, "/api/v1/job")?;
        let p = &job["progress"];
        // With checkpoints, what its committed output has reached; the sources run ahead of
        // it while the sinks catch up.
        let (w, what) = match p["committed_watermark"].as_i64() {
            Some(w) => (w, "its newest completed checkpoint"),
            None if job["checkpoint_interval_ms"].is_number() => (i64::MIN, "no checkpoint yet"),
            None => (
                p["watermark"].as_i64().unwrap_or(i64::MIN),
                "its sources (no checkpoints: nothing says what its output has committed)",
            ),
        };
        return Ok(Some((
            w,
            format!(
                "job `{}` at http://{addr}, {what}",
                job["name"].as_str().unwrap_or("?")
            ),
        )));
    }
    Ok(None)
}

fn show_watermark(w: i64) -> String {
    match w {
        i64::MIN => "none yet".into(),
        i64::MAX => "the end of its input".into(),
        w => weir_core::time::format_utc(w),
    }
}

/// Runs `weir cutover`; returns what to print.
///
/// # Errors
/// A candidate that has not caught up, a validation that finds differences (the report says
/// which), a view name that is a table, a rollback with nothing to go back to.
pub fn run(rt: &tokio::runtime::Runtime, a: &CutoverArgs) -> Result<String> {
    let view = options(a, &a.view)?;
    let now = weir_core::time::format_utc(weir_core::SystemClock.now().0);
    let target = rt.block_on(weir_jdbc::view_target(&view))?;
    if target == weir_jdbc::ViewTarget::Table {
        bail!(
            "`{}` is a table, not a view: readers must read a view for a cutover to switch them. \
             Rename the table (to {}_v1, say), create the view (CREATE VIEW {} AS SELECT * FROM \
             {}_v1) and point readers at it",
            a.view,
            a.view,
            a.view,
            a.view
        );
    }
    let current = match &target {
        weir_jdbc::ViewTarget::View(t) => t.clone(),
        _ => None,
    };
    if a.rollback {
        let history = rt.block_on(weir_jdbc::cutovers(&view))?;
        let last = history
            .iter()
            .rev()
            .find(|c| c.kind == "cutover")
            .with_context(|| {
                format!(
                    "--rollback: no cutover of view `{}` is recorded in weir_cutovers",
                    a.view
                )
            })?;
        // Only the cutover the view still reads: a rollback run twice must not flip back.
        if current.as_deref() != Some(last.to.as_str()) {
            bail!(
                "--rollback: view `{}` reads {} now, not {} (the last cutover's table): it was \
                 rolled back already",
                a.view,
                current.as_deref().unwrap_or("a table weir did not record"),
                last.to
            );
        }
        let back = last.from.clone().with_context(|| {
            format!(
                "--rollback: the last cutover of `{}` ({} to {}) records no table it read before",
                a.view, last.at, last.to
            )
        })?;
        let c = weir_jdbc::Cutover {
            from: Some(last.to.clone()),
            to: back.clone(),
            kind: "rollback".into(),
            at: now,
            live_watermark: None,
            candidate_watermark: None,
            validation: "not validated (rollback)".into(),
        };
        rt.block_on(weir_jdbc::repoint_view(&view, &c))?;
        return Ok(format!(
            "view {} reads {back} again (it read {}); recorded in weir_cutovers\n",
            a.view, last.to
        ));
    }
    let to = a.to.clone().expect("clap requires --to without --rollback");
    if current.as_deref() == Some(to.as_str()) {
        bail!("view `{}` reads {to} already", a.view);
    }
    let mut out = String::new();
    // Caught up?
    let live = watermark(&a.live_checkpoints, &a.live_http, "--live-checkpoints")?;
    let cand = watermark(
        &a.candidate_checkpoints,
        &a.candidate_http,
        "--candidate-checkpoints",
    )?;
    let (live_w, cand_w) = match (live, cand) {
        (Some((l, lf)), Some(_)) if l == i64::MIN && !a.skip_caught_up_check => bail!(
            "the live job's watermark is not known ({lf}: no completed checkpoint, or a split \
             without a watermark), so nothing says the candidate has caught up with it; wait for \
             its next checkpoint and run weir cutover again"
        ),
        (Some((l, lf)), Some((c, cf))) => {
            out.push_str(&format!(
                "live watermark:      {} ({lf})\ncandidate watermark: {} ({cf})\n",
                show_watermark(l),
                show_watermark(c)
            ));
            if c < l && !a.skip_caught_up_check {
                bail!(
                    "{out}the candidate has not caught up: its watermark is {} behind the live \
                     job's; wait, and run weir cutover again (weir status shows both)",
                    crate::supervise::hms(l.saturating_sub(c))
                );
            }
            (Some(l), Some(c))
        }
        _ if a.skip_caught_up_check => {
            out.push_str("caught up: not checked (--skip-caught-up-check)\n");
            (None, None)
        }
        _ => bail!(
            "a cutover switches only to a candidate that has caught up: give the live job's and \
             the backfill's watermarks (--live-checkpoints or --live-http, and \
             --candidate-checkpoints or --candidate-http), or --skip-caught-up-check"
        ),
    };
    // Valid?
    let validation = if a.no_validate {
        "not validated (--no-validate)".to_string()
    } else if target == weir_jdbc::ViewTarget::Missing {
        "not validated (the view is new: nothing live to compare)".to_string()
    } else {
        let args = crate::validate::ValidateArgs {
            live: a.view.clone(),
            candidate: to.clone(),
            url: Some(a.url.clone()),
            username: a.username.clone(),
            password_env: a.password_env.clone(),
            key: a.key.clone(),
            tolerance: a.tolerance.clone(),
            range: a.range.clone(),
            time_column: a.time_column.clone(),
            csv_header: false,
            show: 10,
            partitions: 64,
            // One database: one writer's text on both sides.
            normalise: false,
        };
        let outcome = crate::validate::run(rt, &args)?;
        out.push_str(&outcome.report);
        if !outcome.equal {
            bail!(
                "{out}the candidate differs from what view `{}` shows now: no cutover (give \
                 --range for the range both jobs covered, --tolerance for numeric noise, or \
                 --no-validate to switch anyway)",
                a.view
            );
        }
        outcome
            .report
            .lines()
            .filter(|l| l.starts_with("EQUAL") || l.contains("rows compared"))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let c = weir_jdbc::Cutover {
        from: current.clone(),
        to: to.clone(),
        kind: "cutover".into(),
        at: now,
        live_watermark: live_w,
        candidate_watermark: cand_w,
        validation,
    };
    rt.block_on(weir_jdbc::repoint_view(&view, &c))?;
    out.push_str(&format!(
        "view {} reads {to} now{}; recorded in weir_cutovers (weir cutover --rollback goes back)\n",
        a.view,
        current.map_or(String::new(), |f| format!(" (it read {f})"))
    ));
    Ok(out)
}
