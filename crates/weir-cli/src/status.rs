//! `weir status`: where running jobs are in event time, from their HTTP APIs or newest
//! checkpoints: each job's watermark, time lag, whether it has caught up, and how far each is
//! behind the first named (the live job, when a backfill is compared with it).

use std::path::PathBuf;

use anyhow::Result;
use weir_core::time::Clock;

/// What `weir status` takes.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// A job's HTTP address (host:port; repeatable). Without --http or --checkpoints: the
    /// jobs answering on 127.0.0.1:8081 to 8090, where `weir run` serves by default.
    #[arg(long)]
    pub http: Vec<String>,
    /// A job's checkpoint folder (repeatable): its newest complete checkpoint.
    #[arg(long)]
    pub checkpoints: Vec<PathBuf>,
}

/// One job's place in event time.
struct Place {
    what: String,
    status: String,
    watermark: Option<i64>,
    caught_up: Option<bool>,
}

fn show(w: Option<i64>) -> String {
    match w {
        None | Some(i64::MIN) => "none yet".into(),
        Some(i64::MAX) => "the end of its input".into(),
        Some(w) => weir_core::time::format_utc(w),
    }
}

fn span(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        s if s >= 86_400 => format!("{}d{:02}h{:02}m", s / 86_400, s / 3600 % 24, s / 60 % 60),
        s if s >= 3600 => crate::supervise::hms(ms),
        s => format!("{}m{:02}s", s / 60, s % 60),
    }
}

/// Runs `weir status`; returns what to print.
///
/// # Errors
/// A job named that does not answer, a checkpoint folder without a complete checkpoint; with
/// nothing named, no job answering on the default ports.
pub fn run(a: &StatusArgs) -> Result<String> {
    let mut places = Vec::new();
    let probing = a.http.is_empty() && a.checkpoints.is_empty();
    let addrs: Vec<String> = if probing {
        (8081..=8090).map(|p| format!("127.0.0.1:{p}")).collect()
    } else {
        a.http.clone()
    };
    for addr in &addrs {
        let job = match crate::top::get(addr, "/api/v1/job") {
            Ok(job) => job,
            Err(_) if probing => continue,
            Err(e) => return Err(e),
        };
        let p = &job["progress"];
        places.push(Place {
            what: format!(
                "job `{}` (http://{addr})",
                job["name"].as_str().unwrap_or("?")
            ),
            status: job["status"]["state"]
                .as_str()
                .or_else(|| job["status"].as_str())
                .unwrap_or("?")
                .to_string(),
            watermark: p["watermark"].as_i64(),
            caught_up: p["caught_up"].as_bool(),
        });
    }
    for dir in &a.checkpoints {
        let storage = weir_state::checkpoint::storage_at(dir)?;
        let Some(handle) = storage.latest()? else {
            anyhow::bail!("{}: no complete checkpoint", dir.display());
        };
        let m = storage.read_manifest(&handle)?;
        let least = m.least_watermark();
        places.push(Place {
            what: format!(
                "job `{}` (checkpoint {} in {})",
                m.job,
                m.epoch.0,
                dir.display()
            ),
            status: format!(
                "checkpointed at {}",
                weir_core::time::format_utc(m.created_at.0)
            ),
            watermark: least,
            caught_up: None,
        });
    }
    if places.is_empty() {
        anyhow::bail!(
            "no weir job answers on 127.0.0.1:8081 to 8090: name one with --http HOST:PORT (its \
             address is printed when it starts) or --checkpoints DIR"
        );
    }
    let now = weir_core::SystemClock.now().0;
    let first = places[0].watermark;
    let mut out = String::new();
    for (i, p) in places.iter().enumerate() {
        out.push_str(&format!("{}: {}\n", p.what, p.status));
        out.push_str(&format!("  watermark: {}", show(p.watermark)));
        if let Some(w) = p.watermark.filter(|w| *w != i64::MIN && *w != i64::MAX) {
            out.push_str(&format!(", time lag {}", span(now - w)));
        }
        match p.caught_up {
            Some(true) => out.push_str(", caught up"),
            Some(false) => out.push_str(", not caught up"),
            None => {}
        }
        out.push('\n');
        if i > 0 {
            if let (Some(l), Some(w)) = (first, p.watermark) {
                let verdict = if w >= l {
                    "at or past the first job: it may take over (weir cutover)".to_string()
                } else {
                    format!("{} behind the first job", span(l.saturating_sub(w)))
                };
                out.push_str(&format!("  {verdict}\n"));
            }
        }
    }
    Ok(out)
}
