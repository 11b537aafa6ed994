//! `weir validate`: a backfill's output compared with the live one, row by row, in bounded
//! memory.
//!
//! Each side is a table of a database (`--url`, PostgreSQL or SQLite), a file or folder of
//! part files (CSV, JSON lines, Parquet, as weir's file sinks write them), or a Kafka topic of
//! JSON objects (`kafka://HOST:PORT/TOPIC`, read to the end offsets taken at start), read as
//! text. Values are compared as the text they are. Between sides of different writers (a
//! database table and a file, CSV and Parquet; or with `--normalise`) two normalisations first
//! make the same value the same text: a decimal number loses trailing zeros (`12.50` is `12.5`,
//! `3.0` is `3`), and a timestamp is `yyyy-MM-dd HH:mm:ss[.fff]` without trailing zeros in its
//! fraction. Sides of one writer are compared exactly, so that `2.10` and `2.1` in a STRING
//! column differ.
//! The sides' columns are matched by name (CSV without a header: by position); columns only on
//! one side are reported and not compared.
//!
//! Without `--key` the sides are compared as multisets of rows; with it, rows are matched by
//! key and a matched pair that differs is shown side by side (a numeric column may differ by
//! its `--tolerance`). Rows are spread over `--partitions` spill files per side by the hash of
//! their key (or of the whole row), and one partition at a time is held in memory, so tables
//! of many millions of rows fit in little memory.
//!
//! Exit status: 0 when equal (within tolerances), 1 when not, 2 on errors.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::BuildHasher;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use weir_core::time::Clock;

/// What `weir validate` takes.
#[derive(clap::Args, Debug, Clone)]
pub struct ValidateArgs {
    /// Compare numbers and timestamps after normalising their text (`12.50` as `12.5`) even
    /// when both sides were written alike (by default only sides of different writers are:
    /// a database table and a file, CSV and Parquet).
    #[arg(long)]
    pub normalise: bool,
    /// The live output: a table (with --url), a file or folder of part files, or a Kafka
    /// topic of JSON objects (kafka://HOST:PORT/TOPIC).
    #[arg(long)]
    pub live: String,
    /// The candidate (the backfill's output), as --live.
    #[arg(long)]
    pub candidate: String,
    /// The database both tables are in: `jdbc:postgresql://host:port/db` (user and password
    /// as query parameters, or --username and the environment variable --password-env names)
    /// or `jdbc:sqlite:path`.
    #[arg(long)]
    pub url: Option<String>,
    #[arg(long)]
    pub username: Option<String>,
    /// The environment variable holding the database password.
    #[arg(long)]
    pub password_env: Option<String>,
    /// Columns that identify a row (comma-separated): rows are matched by them, and pairs that
    /// differ are shown side by side. Without: the sides are compared as multisets.
    #[arg(long, value_delimiter = ',')]
    pub key: Vec<String>,
    /// `column=amount`: a numeric column of matched rows may differ by this much (needs --key;
    /// repeatable).
    #[arg(long = "tolerance", value_parser = parse_tolerance)]
    pub tolerance: Vec<(String, f64)>,
    /// `FROM..UNTIL` (epoch ms or ISO-8601, either end may be left out): compare only rows
    /// whose --time-column is in this range (the range both jobs covered).
    #[arg(long, requires = "time_column")]
    pub range: Option<String>,
    /// The column of event time that --range applies to.
    #[arg(long)]
    pub time_column: Option<String>,
    /// CSV files start with a header line naming their columns.
    #[arg(long)]
    pub csv_header: bool,
    /// How many differing rows to show.
    #[arg(long, default_value_t = 10)]
    pub show: usize,
    /// Spill files per side (more: less memory).
    #[arg(long, default_value_t = 64)]
    pub partitions: usize,
}

pub(crate) fn parse_tolerance(s: &str) -> Result<(String, f64), String> {
    let (c, v) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: expected column=amount"))?;
    let v: f64 = v
        .trim()
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| format!("`{s}`: the amount is not a number of 0 or more"))?;
    Ok((c.trim().to_string(), v))
}

/// The outcome: equal within tolerances or not, and what to print.
pub struct Outcome {
    pub equal: bool,
    pub report: String,
}

/// A row: each value as text, NULL as `None`.
type Row = Vec<Option<String>>;

/// One side, read.
struct Side {
    label: String,
    columns: Vec<String>,
    /// Whether the names are the source's own (not positions).
    named: bool,
    /// Rows were staged as JSON objects (one cell each), their columns the union of all their
    /// fields (a writer leaves NULL fields out).
    json: bool,
    /// What wrote the values' text (`csv`, `json`, `parquet`, `postgresql`, `sqlite`, `kafka
    /// json`; a folder may hold several): sides of one and the same writer are compared as
    /// their text is.
    writers: std::collections::BTreeSet<&'static str>,
}

impl Side {
    fn writer_names(&self) -> String {
        self.writers
            .iter()
            .copied()
            .collect::<Vec<_>>()
            .join(" and ")
    }

    /// A staged row as the side's columns.
    fn expand(&self, row: Row) -> Result<Row> {
        if !self.json {
            return Ok(row);
        }
        let text = row.into_iter().next().flatten().unwrap_or_default();
        let serde_json::Value::Object(o) = serde_json::from_str(&text)? else {
            bail!("a staged row is not a JSON object");
        };
        Ok(json_row(&self.columns, &o))
    }
}

/// Runs `weir validate`.
///
/// # Errors
/// A side that cannot be read, a key or time column neither side has, a bad range.
pub fn run(rt: &tokio::runtime::Runtime, args: &ValidateArgs) -> Result<Outcome> {
    let started = weir_core::SystemClock.now().0;
    if !args.tolerance.is_empty() && args.key.is_empty() {
        bail!("--tolerance compares matched rows: give --key, the columns that identify a row");
    }
    let range = match &args.range {
        Some(r) => Some(parse_range(r)?),
        None => None,
    };
    let parts = args.partitions.clamp(1, 4096);
    let spill = tempfile::tempdir().context("creating a folder for spill files")?;
    let mut live = Spiller::new(spill.path(), "live", 1)?;
    let mut cand = Spiller::new(spill.path(), "candidate", 1)?;
    // Columns are known only once a side is open: rows are staged per side as read, then the
    // second pass projects them onto the common columns.
    let live_side = read_side(rt, args, &args.live, &mut live)?;
    let cand_side = read_side(rt, args, &args.candidate, &mut cand)?;
    let plan = Plan::new(args, &live_side, &cand_side, range)?;
    let mut report = String::new();
    let mut stats = [Stats::new(&plan), Stats::new(&plan)];
    let mut a = Spiller::new(spill.path(), "live-p", parts)?;
    let mut b = Spiller::new(spill.path(), "cand-p", parts)?;
    live.replay(|row| plan.place(0, live_side.expand(row)?, &mut stats[0], &mut a))?;
    cand.replay(|row| plan.place(1, cand_side.expand(row)?, &mut stats[1], &mut b))?;
    drop((live, cand));
    a.finish()?;
    b.finish()?;
    let mut diff = Diff::default();
    for p in 0..parts {
        plan.compare(&a.path(p), &b.path(p), &mut diff, args.show)?;
    }
    let took_ms = (weir_core::SystemClock.now().0 - started).max(1);
    // Columns on one side only change what readers see: not equal, whatever the rows say.
    let same_columns = plan.only.iter().all(Vec::is_empty);
    let equal =
        same_columns && diff.only_live == 0 && diff.only_candidate == 0 && diff.differing == 0;
    let _ = writeln!(
        report,
        "live:      {} ({} rows compared)",
        live_side.label, stats[0].rows
    );
    let _ = writeln!(
        report,
        "candidate: {} ({} rows compared)",
        cand_side.label, stats[1].rows
    );
    if let Some((from, until)) = range {
        let _ = writeln!(
            report,
            "range:     rows whose {} is in [{}, {}), on both sides",
            plan.time_label(),
            from.map_or("the start".to_string(), weir_core::time::format_utc),
            until.map_or("the end".to_string(), weir_core::time::format_utc),
        );
    }
    for (side, cols) in [("live", &plan.only[0]), ("candidate", &plan.only[1])] {
        if !cols.is_empty() {
            let _ = writeln!(
                report,
                "columns only in {side} (not compared; the sides are not equal): {}",
                cols.join(", ")
            );
        }
    }
    let matched = if args.key.is_empty() {
        "as multisets of rows".to_string()
    } else {
        format!("by key ({})", args.key.join(", "))
    };
    let _ = writeln!(report, "compared:  {matched}");
    let _ = if plan.normalise {
        writeln!(
            report,
            "values:    as text after normalising numbers and timestamps (12.50 is 12.5), the \
             sides being written by {} and {}",
            live_side.writer_names(),
            cand_side.writer_names()
        )
    } else {
        writeln!(
            report,
            "values:    as their text (both sides written by {}; --normalise to compare 12.50 \
             and 12.5 as one)",
            live_side.writer_names()
        )
    };
    let _ = writeln!(report, "only in live:      {}", diff.only_live);
    let _ = writeln!(report, "only in candidate: {}", diff.only_candidate);
    if !args.key.is_empty() {
        let _ = writeln!(report, "differing by key:  {}", diff.differing);
    }
    for (i, c) in plan.common.iter().enumerate() {
        if let (Some(x), Some(y)) = (&stats[0].sums[i], &stats[1].sums[i]) {
            let _ = writeln!(
                report,
                "sum of {c}: live {} candidate {} (difference {})",
                x.text(),
                y.text(),
                y.minus(x).text()
            );
        }
    }
    if !diff.shown.is_empty() {
        let _ = writeln!(report, "first differences ({}):", plan.common.join(", "));
        for line in &diff.shown {
            let _ = writeln!(report, "  {line}");
        }
    }
    let rows = stats[0].rows + stats[1].rows;
    let _ = writeln!(
        report,
        "{}: took {:.1} s ({:.0} rows/s)",
        if equal { "EQUAL" } else { "DIFFERENT" },
        took_ms as f64 / 1000.0,
        rows as f64 * 1000.0 / took_ms as f64
    );
    Ok(Outcome { equal, report })
}

/// A sum as text: whole when it is, else to 6 decimals without trailing zeros (sums of
/// decimals in binary floating point carry noise past that).
fn fmt_num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        return format!("{v:.0}");
    }
    let s = format!("{v:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.to_string()
    }
}

/// `FROM..UNTIL`, either end optional.
fn parse_range(s: &str) -> Result<(Option<i64>, Option<i64>)> {
    let (a, b) = s
        .split_once("..")
        .with_context(|| format!("--range {s}: expected FROM..UNTIL"))?;
    let end = |t: &str| -> Result<Option<i64>> {
        let t = t.trim();
        if t.is_empty() {
            return Ok(None);
        }
        crate::parse_event_time(t)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("--range: {e}"))
    };
    let (from, until) = (end(a)?, end(b)?);
    if let (Some(f), Some(u)) = (from, until) {
        if f >= u {
            bail!("--range {s}: the range ends before it starts");
        }
    }
    Ok((from, until))
}

/// Reads the side named `what` into `out` (rows as read); returns its label and columns.
fn read_side(
    rt: &tokio::runtime::Runtime,
    args: &ValidateArgs,
    what: &str,
    out: &mut Spiller,
) -> Result<Side> {
    if let Some(rest) = what.strip_prefix("kafka://") {
        let (servers, topic) = rest
            .split_once('/')
            .with_context(|| format!("{what}: expected kafka://HOST:PORT/TOPIC"))?;
        let mut keys = std::collections::BTreeSet::new();
        read_topic(servers, topic, out, &mut keys)?;
        out.finish()?;
        return Ok(Side {
            label: format!("topic {topic} ({servers})"),
            columns: keys.into_iter().collect(),
            named: true,
            json: true,
            writers: ["kafka json"].into(),
        });
    }
    if let Some(url) = &args.url {
        let options = jdbc_options(url, what, &args.username, &args.password_env)?;
        let mut each = |row: Row| -> weir_runtime::Result<()> {
            out.push(0, &row)
                .map_err(|e| weir_runtime::Error::io("spill file", e))
        };
        let columns = rt.block_on(weir_jdbc::scan_text(&options, &mut each))?;
        out.finish()?;
        return Ok(Side {
            label: format!("table {what} ({})", options.database),
            columns,
            named: true,
            json: false,
            writers: [match options.database {
                weir_jdbc::options::Database::Sqlite { .. } => "sqlite",
                _ => "postgresql",
            }]
            .into(),
        });
    }
    let path = Path::new(what);
    let files = files_of(path)?;
    let mut columns: Vec<String> = Vec::new();
    let mut named = true;
    let mut keys = std::collections::BTreeSet::new();
    let mut writers = std::collections::BTreeSet::new();
    let json = files.iter().any(|f| {
        matches!(
            f.extension().and_then(|e| e.to_str()),
            Some("json" | "jsonl" | "ndjson")
        )
    });
    for f in &files {
        let ext = f.extension().and_then(|e| e.to_str()).unwrap_or_default();
        let is_json = matches!(ext, "json" | "jsonl" | "ndjson");
        if is_json != json {
            bail!(
                "{} mixes JSON lines with other formats: the files of one side must agree",
                path.display()
            );
        }
        let cols = match ext {
            "csv" => read_csv(f, args.csv_header, out)?,
            _ if is_json => {
                read_json(f, out, &mut keys)?;
                Vec::new()
            }
            "parquet" => read_parquet(f, out)?,
            other => bail!(
                "{}: cannot tell its format from its extension `{other}`; weir validate reads \
                 .csv, .json / .jsonl and .parquet files",
                f.display()
            ),
        };
        named &= ext != "csv" || args.csv_header;
        writers.insert(match ext {
            "csv" => "csv",
            "parquet" => "parquet",
            _ => "json",
        });
        if columns.is_empty() {
            columns = cols;
        } else if cols != columns && !cols.is_empty() {
            bail!(
                "{} has the columns {}, and {} has {}: the files of one side must agree",
                f.display(),
                cols.join(", "),
                files[0].display(),
                columns.join(", ")
            );
        }
    }
    out.finish()?;
    if json {
        columns = keys.into_iter().collect();
    }
    Ok(Side {
        label: what.to_string(),
        columns,
        named,
        json,
        writers,
    })
}

/// Every record of a Kafka topic of JSON objects, from the earliest offsets to the end offsets
/// taken when the read starts, into `out` (columns by the first record's fields, as for JSON
/// lines). Read in a consumer group of its own, which commits nothing another group reads.
fn read_topic(
    servers: &str,
    topic: &str,
    out: &mut Spiller,
    keys: &mut std::collections::BTreeSet<String>,
) -> Result<()> {
    use weir_connectors::kafka::{KafkaFormat, KafkaSource, KafkaSourceSpec};
    use weir_runtime::source::ReaderContext;
    use weir_runtime::{SourceFactory, SourcePoll};
    let mut spec = KafkaSourceSpec::new(
        servers,
        topic,
        KafkaFormat::Raw,
        vec![("value", arrow_schema::DataType::Utf8)],
    );
    spec.bounded = true;
    spec.group_id = Some(format!("weir-validate-{}", std::process::id()));
    let source = KafkaSource::new(spec)?;
    let splits = source.splits()?;
    let ctx = ReaderContext::standalone(
        topic,
        &splits,
        4096,
        std::sync::Arc::new(weir_core::SystemClock),
    );
    let dead = ctx.dead_letters.clone();
    let mut reader = source.create_reader((0..splits.len()).collect(), ctx)?;
    loop {
        match reader.poll()? {
            SourcePoll::Batch { batch, .. } => {
                let values = batch.column(0);
                let text = arrow_array::cast::AsArray::as_string::<i32>(values);
                for i in 0..batch.num_rows() {
                    if values.is_null(i) {
                        continue;
                    }
                    let v: serde_json::Value = serde_json::from_str(text.value(i))
                        .with_context(|| format!("topic {topic}: a record is not JSON"))?;
                    let serde_json::Value::Object(o) = v else {
                        bail!("topic {topic}: a record is not a JSON object");
                    };
                    keys.extend(o.keys().cloned());
                    out.push(0, &vec![Some(text.value(i).to_string())])?;
                }
            }
            SourcePoll::Pending { wait_ms } => {
                std::thread::sleep(std::time::Duration::from_millis(wait_ms.clamp(1, 50)))
            }
            SourcePoll::Finished => break,
            _ => {}
        }
    }
    if dead.count() > 0 {
        bail!("topic {topic}: {} records could not be read", dead.count());
    }
    Ok(())
}

/// An object's values for `columns`, as text (strings as they are, NULL as `None`).
fn json_row(columns: &[String], o: &serde_json::Map<String, serde_json::Value>) -> Row {
    columns
        .iter()
        .map(|c| match o.get(c) {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(other) => Some(other.to_string()),
        })
        .collect()
}

/// Table `table` of the database at `url`, as weir's jdbc options name it.
pub(crate) fn jdbc_options(
    url: &str,
    table: &str,
    username: &Option<String>,
    password_env: &Option<String>,
) -> Result<weir_jdbc::JdbcOptions> {
    let mut o: std::collections::BTreeMap<String, String> = [
        ("url".to_string(), url.to_string()),
        ("table-name".to_string(), table.to_string()),
    ]
    .into_iter()
    .collect();
    if let Some(u) = username {
        o.insert("username".into(), u.clone());
    }
    if let Some(p) = password_env {
        o.insert("password-env".into(), p.clone());
    }
    Ok(weir_jdbc::JdbcOptions::from_options(&o)?)
}

/// A file, or the finished part files of a folder (names not starting with `.`), sorted.
fn files_of(path: &Path) -> Result<Vec<PathBuf>> {
    let meta = std::fs::metadata(path).with_context(|| format!("{}", path.display()))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    for e in std::fs::read_dir(path).with_context(|| format!("{}", path.display()))? {
        let e = e?;
        let name = e.file_name();
        if name.to_string_lossy().starts_with('.') || e.file_type()?.is_dir() {
            continue;
        }
        files.push(e.path());
    }
    files.sort();
    if files.is_empty() {
        bail!("{}: the folder has no part files", path.display());
    }
    Ok(files)
}

fn read_csv(path: &Path, header: bool, out: &mut Spiller) -> Result<Vec<String>> {
    let mut r = csv::ReaderBuilder::new()
        .has_headers(header)
        .flexible(true)
        .from_path(path)
        .with_context(|| format!("{}", path.display()))?;
    let mut columns: Vec<String> = if header {
        r.headers()?.iter().map(str::to_string).collect()
    } else {
        Vec::new()
    };
    for rec in r.records() {
        let rec = rec.with_context(|| format!("{}", path.display()))?;
        if !header && columns.len() < rec.len() {
            columns = (1..=rec.len()).map(|i| format!("c{i}")).collect();
        }
        // An empty field is NULL, as weir's CSV reader and writer take it.
        let row: Row = rec
            .iter()
            .map(|v| (!v.is_empty()).then(|| v.to_string()))
            .collect();
        out.push(0, &row)?;
    }
    Ok(columns)
}

/// Stages every object of a JSON-lines file whole, adding its fields to `keys`.
fn read_json(
    path: &Path,
    out: &mut Spiller,
    keys: &mut std::collections::BTreeSet<String>,
) -> Result<()> {
    let file = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(&line)
            .with_context(|| format!("{}:{}: not JSON", path.display(), i + 1))?;
        let serde_json::Value::Object(o) = v else {
            bail!("{}:{}: not a JSON object", path.display(), i + 1);
        };
        keys.extend(o.keys().cloned());
        out.push(0, &vec![Some(line)])?;
    }
    Ok(())
}

fn read_parquet(path: &Path, out: &mut Spiller) -> Result<Vec<String>> {
    use arrow_cast::display::{ArrayFormatter, FormatOptions};
    let file = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .with_context(|| format!("{}", path.display()))?
        .build()?;
    let mut columns = Vec::new();
    let options = FormatOptions::default().with_display_error(true);
    for batch in reader {
        let batch = batch?;
        if columns.is_empty() {
            columns = batch
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect();
        }
        let formatters = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()?;
        for r in 0..batch.num_rows() {
            let row: Row = (batch.columns().iter().zip(&formatters))
                .map(|(c, f)| (!c.is_null(r)).then(|| f.value(r).to_string()))
                .collect();
            out.push(0, &row)?;
        }
    }
    Ok(columns)
}

/// `--range` on `--time-column`.
struct TimeFilter {
    /// The column's index on each side.
    index: [usize; 2],
    from: Option<i64>,
    until: Option<i64>,
    name: String,
}

/// How the two sides line up.
struct Plan {
    /// The columns compared, by name.
    common: Vec<String>,
    /// For each side, the index of each common column in its rows.
    index: [Vec<usize>; 2],
    /// Columns only on each side.
    only: [Vec<String>; 2],
    /// Indices into `common` of the key (empty: whole rows).
    key: Vec<usize>,
    /// Per common column: the tolerance of a numeric difference.
    tolerance: Vec<f64>,
    /// The range rows must be in, when given.
    time: Option<TimeFilter>,
    parts: u64,
    /// The sides were written by different writers: numbers and timestamps are compared after
    /// the normalisations of the module doc. One writer's text is compared as it is (`2.10`
    /// and `2.1` differ: in a STRING column they are different values).
    normalise: bool,
}

impl Plan {
    fn new(
        args: &ValidateArgs,
        live: &Side,
        cand: &Side,
        range: Option<(Option<i64>, Option<i64>)>,
    ) -> Result<Plan> {
        let (common, index, only) = if live.named && cand.named {
            let common: Vec<String> = (live.columns.iter())
                .filter(|c| cand.columns.contains(c))
                .cloned()
                .collect();
            let pos = |cols: &[String]| -> Vec<usize> {
                common
                    .iter()
                    .map(|c| cols.iter().position(|x| x == c).expect("common"))
                    .collect()
            };
            let only = |a: &[String], b: &[String]| -> Vec<String> {
                a.iter().filter(|c| !b.contains(c)).cloned().collect()
            };
            (
                common.clone(),
                [pos(&live.columns), pos(&cand.columns)],
                [
                    only(&live.columns, &cand.columns),
                    only(&cand.columns, &live.columns),
                ],
            )
        } else {
            if live.columns.len() != cand.columns.len() {
                bail!(
                    "the live side has {} columns and the candidate {}, and without names \
                     (CSV without --csv-header) columns are matched by position",
                    live.columns.len(),
                    cand.columns.len()
                );
            }
            let n = live.columns.len();
            let names = (1..=n).map(|i| format!("c{i}")).collect();
            (
                names,
                [(0..n).collect(), (0..n).collect()],
                [vec![], vec![]],
            )
        };
        if common.is_empty() {
            bail!(
                "the sides have no column in common: live has {}, candidate {}",
                live.columns.join(", "),
                cand.columns.join(", ")
            );
        }
        let find = |c: &str, what: &str| -> Result<usize> {
            common.iter().position(|x| x == c).with_context(|| {
                format!(
                    "{what} `{c}` is not a column both sides have; they share: {}",
                    common.join(", ")
                )
            })
        };
        let key = (args.key.iter())
            .map(|k| find(k, "--key"))
            .collect::<Result<Vec<_>>>()?;
        let mut tolerance = vec![0.0; common.len()];
        for (c, t) in &args.tolerance {
            tolerance[find(c, "--tolerance")?] = *t;
        }
        let time = match (range, &args.time_column) {
            (Some((from, until)), Some(c)) => {
                let i = find(c, "--time-column")?;
                Some(TimeFilter {
                    index: [index[0][i], index[1][i]],
                    from,
                    until,
                    name: c.clone(),
                })
            }
            _ => None,
        };
        Ok(Plan {
            common,
            index,
            only,
            key,
            tolerance,
            time,
            parts: args.partitions.clamp(1, 4096) as u64,
            normalise: args.normalise || live.writers != cand.writers || live.writers.len() > 1,
        })
    }

    fn time_label(&self) -> String {
        self.time.as_ref().map_or(String::new(), |t| t.name.clone())
    }

    /// Puts `row` of `side` (as read) into its partition, projected and normalised, if it is in
    /// the range.
    fn place(&self, side: usize, row: Row, stats: &mut Stats, out: &mut Spiller) -> Result<()> {
        if let Some(f) = &self.time {
            let t = match &row.get(f.index[side]).cloned().flatten() {
                Some(v) => event_time_of(v).with_context(|| {
                    format!(
                        "--time-column {}: `{v}` is no epoch ms or timestamp",
                        f.name
                    )
                })?,
                None => return Ok(()),
            };
            if f.from.is_some_and(|x| t < x) || f.until.is_some_and(|u| t >= u) {
                return Ok(());
            }
        }
        let projected: Row = self.index[side]
            .iter()
            .map(|&i| {
                row.get(i)
                    .cloned()
                    .flatten()
                    .map(|v| if self.normalise { normalise(&v) } else { v })
            })
            .collect();
        stats.add(&projected);
        let p = self.partition(&projected);
        out.push(p, &projected)?;
        Ok(())
    }

    fn key_of<'a>(&self, row: &'a Row) -> Vec<&'a Option<String>> {
        if self.key.is_empty() {
            row.iter().collect()
        } else {
            self.key.iter().map(|&i| &row[i]).collect()
        }
    }

    fn partition(&self, row: &Row) -> usize {
        let h = foldhash::fast::FixedState::with_seed(0x5745_4952).hash_one(self.key_of(row));
        (h % self.parts) as usize
    }

    /// Compares partition files `a` (live) and `b` (candidate), adding to `diff`.
    fn compare(&self, a: &Path, b: &Path, diff: &mut Diff, show: usize) -> Result<()> {
        // The live partition in memory, by key.
        let mut by_key: HashMap<Vec<Option<String>>, Vec<Row>> = HashMap::new();
        Spiller::read(a, |row| {
            let k = self.key_of(&row).into_iter().cloned().collect();
            by_key.entry(k).or_default().push(row);
            Ok(())
        })?;
        let mut unmatched_candidate: Vec<Row> = Vec::new();
        Spiller::read(b, |row| {
            let k: Vec<Option<String>> = self.key_of(&row).into_iter().cloned().collect();
            let rows = by_key.get_mut(&k);
            match rows.and_then(|rows| {
                let i = rows.iter().position(|r| self.same(r, &row))?;
                Some(rows.swap_remove(i))
            }) {
                Some(_) => {}
                None => unmatched_candidate.push(row),
            }
            Ok(())
        })?;
        // Unmatched candidate rows whose key has unmatched live rows differ; the rest are on
        // one side only.
        for row in unmatched_candidate {
            let k: Vec<Option<String>> = self.key_of(&row).into_iter().cloned().collect();
            let live = (!self.key.is_empty())
                .then(|| by_key.get_mut(&k).and_then(|v| v.pop()))
                .flatten();
            match live {
                Some(l) => {
                    diff.differing += 1;
                    if diff.shown.len() < show {
                        diff.shown.push(format!(
                            "differs:           live {} | candidate {}",
                            show_row(&l),
                            show_row(&row)
                        ));
                    }
                }
                None => {
                    diff.only_candidate += 1;
                    if diff.shown.len() < show {
                        diff.shown
                            .push(format!("only in candidate: {}", show_row(&row)));
                    }
                }
            }
        }
        let mut left: Vec<Row> = by_key.into_values().flatten().collect();
        left.sort();
        for row in left {
            diff.only_live += 1;
            if diff.shown.len() < show {
                diff.shown
                    .push(format!("only in live:      {}", show_row(&row)));
            }
        }
        Ok(())
    }

    /// Whether two rows are the same, numeric columns within their tolerance.
    fn same(&self, a: &Row, b: &Row) -> bool {
        a.iter().zip(b).enumerate().all(|(i, (x, y))| {
            x == y
                || (self.tolerance[i] > 0.0
                    && match (x, y) {
                        (Some(x), Some(y)) => match (x.parse::<f64>(), y.parse::<f64>()) {
                            (Ok(x), Ok(y)) => (x - y).abs() <= self.tolerance[i],
                            _ => false,
                        },
                        _ => false,
                    })
        })
    }
}

fn show_row(row: &Row) -> String {
    row.iter()
        .map(|v| v.as_deref().unwrap_or("NULL"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Epoch ms from an integer or a timestamp's text (UTC).
fn event_time_of(v: &str) -> Option<i64> {
    if let Ok(ms) = v.trim().parse::<i64>() {
        return Some(ms);
    }
    crate::parse_event_time(v).ok()
}

/// The text a value is compared as (see the module doc).
fn normalise(t: &str) -> String {
    let b = t.as_bytes();
    // A timestamp: yyyy-MM-dd[ T]HH:mm:ss[.fff][Z]
    if b.len() >= 19
        && b[4] == b'-'
        && b[7] == b'-'
        && (b[10] == b' ' || b[10] == b'T')
        && b[13] == b':'
        && b[16] == b':'
        && b[..4].iter().all(u8::is_ascii_digit)
    {
        let mut s = format!("{} {}", &t[..10], &t[11..]);
        // UTC spelled as `Z`, `+00` or `+00:00` (PostgreSQL's timestamptz).
        for utc in ["Z", "+00:00", "+00"] {
            if let Some(rest) = s.strip_suffix(utc) {
                s = rest.to_string();
                break;
            }
        }
        if s.contains('.') {
            while s.ends_with('0') {
                s.pop();
            }
            if s.ends_with('.') {
                s.pop();
            }
        }
        return s;
    }
    // A decimal number: digits with one point, optionally signed.
    let digits = t.strip_prefix('-').unwrap_or(t);
    if digits.contains('.')
        && !digits.is_empty()
        && digits.chars().all(|c| c.is_ascii_digit() || c == '.')
        && digits.matches('.').count() == 1
    {
        let mut s = t.trim_end_matches('0').to_string();
        if s.ends_with('.') {
            s.pop();
        }
        if s == "-0" || s.is_empty() || s == "-" {
            return "0".into();
        }
        return s;
    }
    t.to_string()
}

/// Counts and numeric sums of one side's compared rows.
struct Stats {
    rows: u64,
    /// Per common column: the sum while every value is a number.
    sums: Vec<Option<Sum>>,
}

impl Stats {
    fn new(plan: &Plan) -> Stats {
        Stats {
            rows: 0,
            sums: vec![Some(Sum::Exact { units: 0, scale: 0 }); plan.common.len()],
        }
    }

    fn add(&mut self, row: &Row) {
        self.rows += 1;
        for (s, v) in self.sums.iter_mut().zip(row) {
            if let (Some(sum), Some(v)) = (s.as_mut(), v) {
                if !sum.add(v) {
                    *s = None;
                }
            }
        }
    }
}

/// A column's sum: exact while every value is a whole or decimal number and the sum fits 38
/// digits (two sums of epoch milliseconds that differ by 10 ms must not print as equal, as
/// they would in a double past 2^53), else in floating point.
#[derive(Debug, Clone, PartialEq)]
enum Sum {
    /// `units` × 10^-`scale`.
    Exact {
        units: i128,
        scale: u32,
    },
    Float(f64),
}

impl Sum {
    /// Adds the number `text`; `false` when it is not one.
    fn add(&mut self, text: &str) -> bool {
        if let Sum::Exact { units, scale } = *self {
            if let Some(sum) =
                decimal(text).and_then(|v| exact((units, scale), v, i128::checked_add))
            {
                *self = sum;
                return true;
            }
            *self = Sum::Float(self.as_f64());
        }
        match (&mut *self, text.trim().parse::<f64>()) {
            (Sum::Float(sum), Ok(x)) if x.is_finite() => {
                *sum += x;
                true
            }
            _ => false,
        }
    }

    fn as_f64(&self) -> f64 {
        match *self {
            Sum::Exact { units, scale } => units as f64 / 10f64.powi(scale as i32),
            Sum::Float(x) => x,
        }
    }

    /// `self - other`, exact when both are.
    fn minus(&self, other: &Sum) -> Sum {
        if let (
            &Sum::Exact {
                units: a,
                scale: sa,
            },
            &Sum::Exact {
                units: b,
                scale: sb,
            },
        ) = (self, other)
        {
            if let Some(d) = exact((a, sa), (b, sb), i128::checked_sub) {
                return d;
            }
        }
        Sum::Float(self.as_f64() - other.as_f64())
    }

    fn text(&self) -> String {
        match *self {
            Sum::Exact { units, scale: 0 } => units.to_string(),
            Sum::Exact { units, scale } => {
                let p = 10i128.pow(scale);
                let sign = if units < 0 { "-" } else { "" };
                let frac = format!("{:0w$}", (units % p).unsigned_abs(), w = scale as usize);
                let frac = frac.trim_end_matches('0');
                let whole = (units / p).unsigned_abs();
                if frac.is_empty() {
                    format!("{sign}{whole}")
                } else {
                    format!("{sign}{whole}.{frac}")
                }
            }
            Sum::Float(x) => fmt_num(x),
        }
    }
}

/// `text` as `units` × 10^-scale when it is a plain decimal number (`-12`, `3.50`), with at
/// most 18 decimals.
fn decimal(text: &str) -> Option<(i128, u32)> {
    let t = text.trim();
    let (neg, digits) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && frac.is_empty()) || !all_digits(whole) || !all_digits(frac) {
        return None;
    }
    if frac.len() > 18 || whole.len() + frac.len() > 38 {
        return None;
    }
    let units: i128 = format!("{whole}{frac}").parse().ok()?;
    Some((if neg { -units } else { units }, frac.len() as u32))
}

/// `op` of two exact numbers (units, scale) at the greater scale; `None` past 38 digits.
fn exact(a: (i128, u32), b: (i128, u32), op: fn(i128, i128) -> Option<i128>) -> Option<Sum> {
    let to = a.1.max(b.1);
    let units = op(rescale(a.0, a.1, to)?, rescale(b.0, b.1, to)?)?;
    Some(Sum::Exact { units, scale: to })
}

/// `units` × 10^-`from` with `to` (≥ `from`) decimals; `None` past 38 digits.
fn rescale(units: i128, from: u32, to: u32) -> Option<i128> {
    units.checked_mul(10i128.checked_pow(to - from)?)
}

#[derive(Default)]
struct Diff {
    only_live: u64,
    only_candidate: u64,
    differing: u64,
    shown: Vec<String>,
}

/// Rows spilled to `parts` files, one JSON array a line.
struct Spiller {
    paths: Vec<PathBuf>,
    out: Vec<Option<BufWriter<std::fs::File>>>,
}

impl Spiller {
    fn new(dir: &Path, name: &str, parts: usize) -> Result<Spiller> {
        let paths: Vec<PathBuf> = (0..parts)
            .map(|p| dir.join(format!("{name}-{p}")))
            .collect();
        Ok(Spiller {
            out: (0..parts).map(|_| None).collect(),
            paths,
        })
    }

    fn path(&self, p: usize) -> PathBuf {
        self.paths[p].clone()
    }

    fn push(&mut self, p: usize, row: &Row) -> std::io::Result<()> {
        if self.out[p].is_none() {
            self.out[p] = Some(BufWriter::new(std::fs::File::create(&self.paths[p])?));
        }
        let w = self.out[p].as_mut().expect("opened above");
        serde_json::to_writer(&mut *w, row)?;
        w.write_all(b"\n")
    }

    fn finish(&mut self) -> Result<()> {
        for w in self.out.iter_mut().flatten() {
            w.flush()?;
        }
        Ok(())
    }

    /// Every row of partition 0, in order.
    fn replay(&mut self, f: impl FnMut(Row) -> Result<()>) -> Result<()> {
        self.finish()?;
        Spiller::read(&self.paths[0], f)
    }

    /// Every row of the file at `path` (none when there is no file).
    fn read(path: &Path, mut f: impl FnMut(Row) -> Result<()>) -> Result<()> {
        let file = match std::fs::File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        for line in BufReader::new(file).lines() {
            f(serde_json::from_str(&line?)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{normalise, Sum};

    /// Sums of epoch milliseconds over millions of rows pass 2^63 and lose their last digits
    /// in a double: a difference of 10 ms must still show (it printed as 0).
    #[test]
    fn sums_are_exact_for_whole_and_decimal_numbers() {
        let sum = |values: &[&str]| {
            let mut s = Sum::Exact { units: 0, scale: 0 };
            for v in values {
                assert!(s.add(v), "{v}");
            }
            s
        };
        let big = ["1704075828022"; 10_000_000 / 1_000_000];
        let mut live: Vec<&str> = big.to_vec();
        live.extend(["9223372036854775807", "9223372036854775807"]);
        let mut candidate = live.clone();
        candidate[0] = "1704075828012";
        let (l, c) = (sum(&live), sum(&candidate));
        assert_eq!(c.minus(&l).text(), "-10");
        assert_eq!(sum(&["12.50", "-0.25", "3"]).text(), "15.25");
        assert_eq!(sum(&["-1.5", "0.5"]).text(), "-1");
        assert_eq!(sum(&["-0.5"]).text(), "-0.5");
        // Exponents and other spellings go on in floating point.
        assert_eq!(sum(&["1", "1e3"]).text(), "1001");
        let mut s = Sum::Exact { units: 0, scale: 0 };
        assert!(!s.add("abc"));
    }

    #[test]
    fn numbers_and_timestamps_compare_as_one_spelling() {
        assert_eq!(normalise("12.50"), "12.5");
        assert_eq!(normalise("3.0"), "3");
        assert_eq!(normalise("-0.0"), "0");
        assert_eq!(normalise("100"), "100");
        assert_eq!(normalise("2024-01-01T00:10:00.000Z"), "2024-01-01 00:10:00");
        assert_eq!(
            normalise("2024-01-01 00:10:00.5+00"),
            "2024-01-01 00:10:00.5"
        );
        assert_eq!(normalise(" a"), " a");
        assert_eq!(
            normalise("2024-01-01 00:10:00.250"),
            "2024-01-01 00:10:00.25"
        );
        assert_eq!(normalise("k1.0x"), "k1.0x");
        assert_eq!(normalise("1.2.3"), "1.2.3");
    }
}
