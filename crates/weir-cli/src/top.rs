//! `weir top`: the essentials of a job running on this machine, in the terminal, read from its
//! HTTP API every second: what each operator spends its time on and which one is the
//! bottleneck, where every source split stands, and the alerts.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table};
use ratatui::Frame;
use serde_json::Value;

#[derive(clap::Args)]
pub struct TopArgs {
    /// The job's HTTP address, as `weir run` printed it ("web UI and metrics: http://…/").
    #[arg(long, default_value = weir_http::DEFAULT_ADDR)]
    http: String,
    /// Print one frame as text and exit (for scripts and logs; also what a non-terminal
    /// output gets).
    #[arg(long)]
    once: bool,
    /// The whole group the job at --http is a member of (`weir run --group`): every member
    /// and every task, read from each member's HTTP API.
    #[arg(long)]
    group: bool,
}

pub fn run(a: TopArgs) -> Result<()> {
    let addr = host_port(&a.http).to_string();
    let once = a.once || !std::io::IsTerminal::is_terminal(&std::io::stdout());
    if a.group {
        return run_group(&addr, once);
    }
    if once {
        let (job, metrics) = fetch(&addr)?;
        print!("{}", render_text(&job, &metrics, 120, 40)?);
        return Ok(());
    }
    watch(|f| match &fetch(&addr) {
        Ok((job, metrics)) => draw(f, job, metrics),
        Err(e) => f.render_widget(
            Paragraph::new(format!("weir top: {e:#}\n\nq quits")),
            f.area(),
        ),
    })
}

/// Draws a frame with `frame` every second, until q or Esc.
fn watch(mut frame: impl FnMut(&mut Frame)) -> Result<()> {
    let mut terminal = ratatui::init();
    let result = (|| -> Result<()> {
        loop {
            terminal.draw(&mut frame)?;
            if ratatui::crossterm::event::poll(Duration::from_secs(1))? {
                if let ratatui::crossterm::event::Event::Key(k) = ratatui::crossterm::event::read()?
                {
                    use ratatui::crossterm::event::KeyCode;
                    if matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) {
                        return Ok(());
                    }
                }
            }
        }
    })();
    ratatui::restore();
    result
}

/// `host:port` of an HTTP address as `weir run` prints it (`http://host:port/`).
fn host_port(url: &str) -> &str {
    url.trim_start_matches("http://").trim_end_matches('/')
}

/// `weir top --group`: the group from `addr`'s member, refreshed every second until q.
fn run_group(addr: &str, once: bool) -> Result<()> {
    if once {
        print!("{}", group_text(addr)?);
        return Ok(());
    }
    watch(|f| {
        let text = group_text(addr).unwrap_or_else(|e| format!("weir top: {e:#}\n"));
        f.render_widget(
            Paragraph::new(format!("{text}\nq quits"))
                .block(Block::bordered().title(" weir top --group ")),
            f.area(),
        )
    })
}

/// The group as text: its members, then every task with its member and progress, read from
/// each member that serves an HTTP API (a member without one is listed with its tasks'
/// owner only).
fn group_text(addr: &str) -> Result<String> {
    use std::fmt::Write as _;
    let group = get(addr, "/api/v1/group")?;
    let members: Vec<String> = (group["members"].as_array().into_iter().flatten())
        .filter_map(|m| m.as_str().map(String::from))
        .collect();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "group {}: {} members",
        group["group"].as_str().unwrap_or("?"),
        members.len()
    );
    let mut rows: Vec<(i64, String)> = Vec::new();
    for m in &members {
        let http = group["http"][m].as_str();
        let _ = writeln!(out, "  {m}  {}", http.unwrap_or("(no HTTP API)"));
        let answer = match http {
            Some(url) => get(host_port(url), "/api/v1/group").ok(),
            None => None,
        };
        // Only the member itself: an address such as 127.0.0.1:8081 written on another machine
        // names whichever member listens there.
        let shown: Vec<Value> = (answer.as_ref())
            .filter(|a| a["member"].as_str() == Some(m.as_str()))
            .and_then(|a| a["tasks"].as_array().cloned())
            .unwrap_or_default();
        if shown.is_empty() {
            for t in
                (group["assignment"][m].as_array().into_iter().flatten()).filter_map(Value::as_i64)
            {
                rows.push((t, format!("{t:>4}  {:<10} {m}", "assigned")));
            }
        }
        for t in shown {
            let n = t["task"].as_i64().unwrap_or(-1);
            let opt = |v: &Value| v.as_i64().map_or("-".to_string(), |x| x.to_string());
            rows.push((
                n,
                format!(
                    "{n:>4}  {:<10} {m}  stage {} partition {}  watermark {}  time lag {} ms  \
                     lag {} records  rows {}  checkpoints {}  from checkpoint {}",
                    t["state"].as_str().unwrap_or("?"),
                    opt(&t["stage"]),
                    opt(&t["partition"]),
                    time_of(&t["watermark"]),
                    opt(&t["time_lag_ms"]),
                    opt(&t["lag_records"]),
                    opt(&t["rows_read"]),
                    opt(&t["checkpoints_completed"]),
                    opt(&t["restored_from"]),
                ),
            ));
        }
    }
    rows.sort();
    let _ = writeln!(out, "task  state      member");
    for (_, r) in rows {
        let _ = writeln!(out, "{r}");
    }
    Ok(out)
}

/// The job and its newest metrics from its HTTP API.
fn fetch(addr: &str) -> Result<(Value, Value)> {
    let job = get(addr, "/api/v1/job")?;
    let metrics = get(addr, "/api/v1/metrics").unwrap_or(Value::Null);
    Ok((job, metrics))
}

/// GET `path` from `addr` (HTTP/1.1, on this machine), as JSON.
pub(crate) fn get(addr: &str, path: &str) -> Result<Value> {
    let mut s = TcpStream::connect(addr).with_context(|| {
        format!("no weir job answers at {addr}: start one with weir run (its HTTP address is printed at start), or give --http")
    })?;
    // A job busy on every core answers late, not never.
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            anyhow::anyhow!("the weir job at {addr} did not answer {path} within 30 s")
        }
        _ => anyhow::Error::new(e).context(format!("reading {path} from {addr}")),
    })?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").context("not an HTTP answer")?;
    let status = head.lines().next().unwrap_or_default();
    if !status.contains(" 200 ") {
        bail!("{addr}{path}: {status}");
    }
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok(serde_json::from_str(&body)?)
}

/// The body of a chunked HTTP answer.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// One frame, rendered off screen, as text.
fn render_text(job: &Value, metrics: &Value, width: u16, height: u16) -> Result<String> {
    let mut t = ratatui::Terminal::new(ratatui::backend::TestBackend::new(width, height))?;
    t.draw(|f| draw(f, job, metrics))?;
    let buf = t.backend().buffer();
    let mut out = String::new();
    for y in 0..buf.area.height {
        let line: String = (0..buf.area.width)
            .map(|x| buf[(x, y)].symbol().to_string())
            .collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    Ok(out)
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

/// Epoch ms as a UTC time of day, or `-`.
fn time_of(v: &Value) -> String {
    match v.as_i64() {
        Some(ms) => weir_core::time::format_utc(ms),
        None => "-".into(),
    }
}

fn draw(f: &mut Frame, job: &Value, m: &Value) {
    let nodes = m["nodes"].as_array().cloned().unwrap_or_default();
    let splits: Vec<(String, Value)> = nodes
        .iter()
        .flat_map(|n| {
            let name = n["name"].as_str().unwrap_or_default().to_string();
            n["splits"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |s| (name.clone(), s))
        })
        .collect();
    let [head, ops, srcs] = Layout::vertical([
        Constraint::Length(5),
        Constraint::Min(6),
        Constraint::Length((splits.len() as u16 + 3).min(14)),
    ])
    .areas(f.area());

    // Job, status, bottleneck, alerts.
    let status = job["status"]["state"].as_str().unwrap_or("?");
    let bottleneck = m["bottleneck"].as_str();
    let mut lines = vec![Line::from(format!(
        "job `{}`: {status}   rows in flight {} (bound {})   checkpoints {}",
        job["name"].as_str().unwrap_or("?"),
        m["in_flight_rows"],
        m["in_flight_bound_rows"],
        m["checkpoints"]["completed"]
    ))];
    lines.push(match bottleneck {
        Some(b) => Line::styled(
            format!("bottleneck: `{b}` (busy while what feeds it is backpressured)"),
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        ),
        None => Line::from("bottleneck: none"),
    });
    let mut alerts = Vec::new();
    for n in &nodes {
        if n["spread_alert"].as_bool() == Some(true) {
            alerts.push(format!(
                "inputs of `{}` apart in event time",
                n["name"].as_str().unwrap_or("?")
            ));
        }
        if n["split_spread_alert"].as_bool() == Some(true) {
            alerts.push(format!(
                "splits of `{}` apart in watermark",
                n["name"].as_str().unwrap_or("?")
            ));
        }
    }
    if m["slo"]["breaching"].as_bool() == Some(true) {
        alerts.push("time lag beyond the objective".into());
    }
    lines.push(if alerts.is_empty() {
        Line::from("alerts: none")
    } else {
        Line::styled(
            format!("ALERT: {}", alerts.join("; ")),
            Style::new().fg(Color::Yellow),
        )
    });
    f.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" weir top (q quits) ")),
        head,
    );

    // Operators: time spent per second (the busiest subtask), rows, state.
    let rows = nodes.iter().map(|n| {
        let subs = n["subtasks"].as_array().cloned().unwrap_or_default();
        let most = |k: &str| subs.iter().map(|s| num(&s[k])).fold(0.0, f64::max) / 10.0;
        let name = n["name"].as_str().unwrap_or_default().to_string();
        let style = if bottleneck == Some(name.as_str()) {
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
        } else {
            Style::new()
        };
        Row::new(vec![
            name,
            n["kind"].as_str().unwrap_or_default().to_string(),
            format!("{:.0} %", most("busy_ms_per_sec")),
            format!("{:.0} %", most("backpressured_ms_per_sec")),
            format!("{:.0} %", most("idle_ms_per_sec")),
            n["rows_in"].to_string(),
            n["rows_out"].to_string(),
            n["state_rows"].to_string(),
        ])
        .style(style)
    });
    let widths = [
        Constraint::Fill(3),
        Constraint::Fill(2),
        Constraint::Length(6),
        Constraint::Length(9),
        Constraint::Length(6),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(10),
    ];
    f.render_widget(
        Table::new(rows, widths)
            .header(
                Row::new([
                    "operator",
                    "kind",
                    "busy",
                    "backpress",
                    "idle",
                    "rows in",
                    "rows out",
                    "state",
                ])
                .style(Style::new().add_modifier(Modifier::BOLD)),
            )
            .block(
                Block::bordered().title(" operators (the busiest subtask's share of each second) "),
            ),
        ops,
    );

    // Source splits.
    let rows = splits.iter().map(|(source, s)| {
        let state = if s["finished"].as_bool() == Some(true) {
            "finished"
        } else if s["paused"].as_bool() == Some(true) {
            "paused (alignment)"
        } else if s["idle"].as_bool() == Some(true) {
            "idle"
        } else {
            "reading"
        };
        Row::new(vec![
            format!("{source} / {}", s["split"].as_str().unwrap_or_default()),
            state.to_string(),
            time_of(&s["watermark"]),
            match s["time_lag_ms"].as_i64() {
                Some(l) => format!("{:.1} s", l as f64 / 1000.0),
                None => "-".into(),
            },
            s["rows_read"].to_string(),
        ])
    });
    let widths = [
        Constraint::Fill(3),
        Constraint::Length(19),
        Constraint::Length(25),
        Constraint::Length(14),
        Constraint::Length(10),
    ];
    f.render_widget(
        Table::new(rows, widths)
            .header(
                Row::new(["split", "state", "watermark", "time lag", "rows"])
                    .style(Style::new().add_modifier(Modifier::BOLD)),
            )
            .block(Block::bordered().title(" source splits ")),
        srcs,
    );
}
