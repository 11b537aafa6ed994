//! The job's SET options: which are known, and the restart strategy they make.

use super::*;

/// The `SET` keys weir reads.
pub(super) const SETTINGS: &[&str] = &[
    "parallelism.default",
    "pipeline.name",
    "pipeline.operator-chaining",
    "pipeline.operator-chaining.enabled",
    "table.exec.state.ttl",
    crate::zone::LOCAL_TIME_ZONE,
    "table.optimizer.agg-phase-strategy",
    "weir.aggregation.salts",
    "weir.aggregation.hot-key-share",
    "weir.window.max-windows-per-row",
    "weir.max-dead-letter-share",
    "weir.slo.time-lag",
    "weir.sink.rate-limit",
    "execution.runtime-mode",
    "weir.batch.sort-memory",
    "weir.batch.spill-dir",
    "weir.files.read-in-step",
    "scan.watermark.idle-timeout",
    "table.exec.source.idle-timeout",
    "scan.watermark.alignment.group",
    "scan.watermark.alignment.max-drift",
    "scan.watermark.alignment.update-interval",
    "scan.watermark.alignment.buffer-size",
    "pipeline.watermark-alignment.allow-unaligned-source-splits",
    "state.backend.type",
    "weir.state.memory-budget",
    "weir.state.memory-first",
    "state.backend.rocksdb.localdir",
    "execution.checkpointing.incremental",
    "state.backend.incremental",
    "execution.checkpointing.interval",
    "execution.checkpointing.dir",
    "state.checkpoints.dir",
    "state.checkpoints.num-retained",
    "weir.checkpointing.lock-lease",
    "restart-strategy.type",
    "restart-strategy.fixed-delay.attempts",
    "restart-strategy.fixed-delay.delay",
    "restart-strategy.exponential-delay.initial-backoff",
    "restart-strategy.exponential-delay.max-backoff",
    "restart-strategy.exponential-delay.backoff-multiplier",
    "restart-strategy.exponential-delay.attempts",
];

/// Flink `table.*` and `execution.*` settings weir does not read that change no result (how
/// often, how fast, with what resources): ignored with a warning.
const WITHOUT_EFFECT_ON_RESULTS: &[&str] = &[
    "execution.checkpointing.mode",
    "execution.checkpointing.timeout",
    "execution.checkpointing.min-pause",
    "execution.checkpointing.max-concurrent-checkpoints",
    "execution.checkpointing.tolerable-failed-checkpoints",
    "execution.checkpointing.externalized-checkpoint-retention",
    "execution.checkpointing.unaligned",
    "execution.checkpointing.unaligned.enabled",
    "execution.checkpointing.aligned-checkpoint-timeout",
    "execution.buffer-timeout",
    "execution.buffer-timeout.enabled",
    "execution.buffer-timeout.interval",
    "execution.target",
    "execution.attached",
    "table.exec.mini-batch.enabled",
    "table.exec.mini-batch.allow-latency",
    "table.exec.mini-batch.size",
    "table.exec.resource.default-parallelism",
    "table.exec.async-lookup.buffer-capacity",
    "table.exec.async-lookup.timeout",
    "table.optimizer.distinct-agg.split.enabled",
    "table.optimizer.distinct-agg.split.bucket-num",
    "table.optimizer.join-reorder-enabled",
    "table.optimizer.reuse-source-enabled",
    "table.optimizer.reuse-sub-plan-enabled",
    "table.dynamic-table-options.enabled",
    "table.display.max-column-width",
];

/// Flink settings weir takes only at the value that is its own behaviour (Flink's default):
/// any other value would change results, so it is refused.
const ONLY_AT: &[(&str, &[&str], &str)] = &[(
    "table.exec.legacy-cast-behaviour",
    &["disabled"],
    "weir's casts are Flink's current ones",
)];

/// Refuses a `SET` key weir does not read that is a misspelling of one it does (or any
/// unknown `weir.` key): it would be ignored without a word. A Flink `table.*` or
/// `execution.*` key weir does not read is refused too, unless it changes no result (a list
/// of them is ignored with a warning) or has the value weir behaves by
/// (`table.exec.legacy-cast-behaviour` = 'disabled'): ignoring it would give another answer
/// than Flink's without a word. Other keys (`python.*`, say) are ignored with a warning.
pub(super) fn check_settings(settings: &BTreeMap<String, String>) -> Result<()> {
    for (key, value) in settings {
        if SETTINGS.contains(&key.as_str()) {
            continue;
        }
        if let Some((_, allowed, behaviour)) = ONLY_AT.iter().find(|(k, _, _)| *k == key) {
            if allowed.contains(&value.trim().to_lowercase().as_str()) {
                continue;
            }
            return Err(plan_err(format!(
                "SET '{key}' = '{value}': {behaviour}, so this setting would change results \
                 without being applied; remove it (or set it to '{}')",
                allowed[0].to_uppercase()
            )));
        }
        if WITHOUT_EFFECT_ON_RESULTS.contains(&key.as_str()) {
            tracing::warn!(key = %key, "SET '{key}' changes no result in weir; ignored");
            continue;
        }
        let nearest = SETTINGS
            .iter()
            .map(|k| (distance(key, k), *k))
            .min_by_key(|x| x.0);
        let hint = did_you_mean(key, SETTINGS.iter().copied());
        if key.starts_with("weir.") || nearest.is_some_and(|(d, _)| d <= 2) {
            return Err(plan_err(format!(
                "SET '{key}': not a setting weir reads{hint}"
            )));
        }
        if key.starts_with("table.") || key.starts_with("execution.") {
            return Err(plan_err(format!(
                "SET '{key}' = '{value}': weir does not implement this Flink setting, and it may \
                 change results, so it is not ignored; remove it to run as Flink does by \
                 default{hint}"
            )));
        }
        tracing::warn!(key = %key, "SET '{key}' is not a setting weir reads; ignored");
    }
    Ok(())
}

/// `SET 'pipeline.operator-chaining.enabled'` (Flink 2's name) or
/// `'pipeline.operator-chaining'` (Flink 1's): whether operators run chained into the node
/// before them where they can (the default). Changes no result, only how many subtasks run.
pub(super) fn operator_chaining(settings: &BTreeMap<String, String>) -> Result<bool> {
    let mut on = true;
    for key in [
        "pipeline.operator-chaining",
        "pipeline.operator-chaining.enabled",
    ] {
        on = bool_setting(settings, key)?.unwrap_or(on);
    }
    Ok(on)
}

/// A `SET` key that is 'true' or 'false' (any case), if set.
pub(super) fn bool_setting(settings: &BTreeMap<String, String>, key: &str) -> Result<Option<bool>> {
    let Some(v) = settings.get(key) else {
        return Ok(None);
    };
    match v.trim().to_lowercase().as_str() {
        "true" => Ok(Some(true)),
        "false" => Ok(Some(false)),
        _ => Err(plan_err(format!(
            "SET '{key}' = '{v}': use 'true' or 'false'"
        ))),
    }
}

/// `SET 'state.backend.type'` ('hashmap', the default, or 'rocksdb'; Flink's names),
/// `'weir.state.memory-budget'`, `'weir.state.memory-first'` and
/// `'state.backend.rocksdb.localdir'` (the last three only with 'rocksdb': with 'hashmap' all
/// state is in memory, and a budget would be a promise not kept).
pub(super) fn state_backend(
    settings: &BTreeMap<String, String>,
) -> Result<weir_state::backend::StateBackend> {
    use weir_state::backend::{parse_memory_first, parse_size, BackendKind, StateBackend};
    let kind = match settings.get("state.backend.type") {
        Some(v) => BackendKind::parse(v)
            .map_err(|e| plan_err(format!("SET 'state.backend.type' = {e}")))?,
        None => BackendKind::HashMap,
    };
    if kind == BackendKind::RocksDb && !weir_operators::ROCKSDB_BUILT {
        return Err(plan_err(
            "SET 'state.backend.type' = 'rocksdb': this weir's operators were built without \
             RocksDB; build it with `cargo build --release -p weir-cli --features rocksdb`",
        ));
    }
    let mut backend = StateBackend {
        kind,
        ..Default::default()
    };
    for key in [
        "weir.state.memory-budget",
        "weir.state.memory-first",
        "state.backend.rocksdb.localdir",
    ] {
        if settings.contains_key(key) && kind != BackendKind::RocksDb {
            return Err(plan_err(format!(
                "SET '{key}' applies to state on disk: add SET 'state.backend.type' = 'rocksdb', \
                 or remove it (with 'hashmap' all state is in memory)"
            )));
        }
    }
    if let Some(v) = settings.get("weir.state.memory-budget") {
        let bytes =
            parse_size(v).map_err(|e| plan_err(format!("SET 'weir.state.memory-budget' = {e}")))?;
        if bytes < 16 << 20 {
            return Err(plan_err(format!(
                "SET 'weir.state.memory-budget' = '{v}': below the least RocksDB works with \
                 here (16 mb)"
            )));
        }
        backend.memory_budget = Some(bytes);
    }
    if let Some(v) = settings.get("weir.state.memory-first") {
        backend.memory_first = parse_memory_first(v)
            .map_err(|e| plan_err(format!("SET 'weir.state.memory-first' = {e}")))?;
    }
    if let Some(v) = settings.get("state.backend.rocksdb.localdir") {
        backend.local_dir = Some(std::path::PathBuf::from(v.trim()));
    }
    // Flink 2's name, then Flink 1's; false by default, as in Flink.
    for key in [
        "execution.checkpointing.incremental",
        "state.backend.incremental",
    ] {
        if let Some(v) = settings.get(key) {
            backend.incremental = match v.trim().to_lowercase().as_str() {
                "true" => true,
                "false" => false,
                _ => {
                    return Err(plan_err(format!(
                        "SET '{key}' = '{v}': use 'true' or 'false'"
                    )))
                }
            };
            break;
        }
    }
    Ok(backend)
}

/// `SET 'execution.runtime-mode'`: `None` for 'streaming' (the default), the batch run's
/// settings for 'batch' (`weir.batch.sort-memory`, `weir.batch.spill-dir`).
pub(super) fn batch_options(
    settings: &BTreeMap<String, String>,
) -> Result<Option<weir_runtime::batch::BatchOptions>> {
    let mode = settings.get("execution.runtime-mode");
    match mode.map(|m| m.trim().to_lowercase()).as_deref() {
        None | Some("streaming") => {
            for key in ["weir.batch.sort-memory", "weir.batch.spill-dir"] {
                if settings.contains_key(key) {
                    return Err(plan_err(format!(
                        "SET '{key}' applies to batch jobs only: add SET \
                         'execution.runtime-mode' = 'batch', or remove it"
                    )));
                }
            }
            return Ok(None);
        }
        Some("batch") => {}
        Some(_) => {
            return Err(plan_err(format!(
                "SET 'execution.runtime-mode' = '{}': 'streaming' (the default) or 'batch'",
                mode.map_or("", |m| m.as_str())
            )))
        }
    }
    if let Some(ttl) = settings.get("table.exec.state.ttl") {
        tracing::warn!(
            "SET 'table.exec.state.ttl' = '{ttl}' does not apply to a batch job: as in Flink's \
             batch execution, its state lives to the end of the input"
        );
    }
    let mut options = weir_runtime::batch::BatchOptions::default();
    if let Some(v) = settings.get("weir.batch.sort-memory") {
        options.sort_memory_bytes = bytes("weir.batch.sort-memory", v)?;
    }
    if let Some(v) = settings.get("weir.batch.spill-dir") {
        options.spill_dir = Some(v.trim().into());
    }
    Ok(Some(options))
}

/// `5 s` as (5.0, "s"): a number and its unit in lower case (empty when there is none).
fn number_and_unit(v: &str) -> Option<(f64, String)> {
    let v = v.trim();
    let (num, unit) = v.split_at(
        v.find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(v.len()),
    );
    Some((num.parse().ok()?, unit.trim().to_lowercase()))
}

/// A size setting such as `256 mb`, `1 gb`, `65536` (bytes).
pub(super) fn bytes(key: &str, v: &str) -> Result<u64> {
    let (n, unit) = number_and_unit(v).ok_or_else(|| {
        plan_err(format!(
            "SET '{key}' = '{v}': expected a size such as '256 mb'"
        ))
    })?;
    let f = match unit.as_str() {
        "" | "b" | "bytes" => 1.0,
        "kb" | "k" | "kib" => 1024.0,
        "mb" | "m" | "mib" => 1024.0 * 1024.0,
        "gb" | "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(plan_err(format!(
                "SET '{key}' = '{v}': unknown unit `{other}` (b, kb, mb or gb)"
            )))
        }
    };
    let b = n * f;
    if !b.is_finite() || b < 1.0 || b >= u64::MAX as f64 {
        return Err(plan_err(format!(
            "SET '{key}' = '{v}': a size of at least one byte"
        )));
    }
    Ok(b as u64)
}

/// Flink's `restart-strategy.*` settings (the default when none is given).
pub(super) fn restart_strategy(
    settings: &BTreeMap<String, String>,
) -> Result<weir_runtime::checkpoint::RestartStrategy> {
    use weir_runtime::checkpoint::RestartStrategy;
    let number = |key: &str, default: u32| -> Result<u32> {
        settings.get(key).map_or(Ok(default), |v| {
            v.trim()
                .parse()
                .map_err(|_| plan_err(format!("SET '{key}' = '{v}': a whole number")))
        })
    };
    let duration = |key: &str, default: u64| -> Result<u64> {
        settings.get(key).map_or(Ok(default), |v| {
            duration_ms(key, v).map(|ms| ms.max(0) as u64)
        })
    };
    match settings.get("restart-strategy.type").map(|s| s.to_lowercase()) {
        None => Ok(RestartStrategy::default()),
        Some(t) if t == "none" || t == "disable" || t == "off" => Ok(RestartStrategy::None),
        Some(t) if t == "fixed-delay" || t == "fixeddelay" => Ok(RestartStrategy::FixedDelay {
            attempts: number("restart-strategy.fixed-delay.attempts", 3)?,
            delay_ms: duration("restart-strategy.fixed-delay.delay", 1_000)?,
        }),
        Some(t) if t == "exponential-delay" => {
            Ok(RestartStrategy::ExponentialDelay {
                initial_ms: duration("restart-strategy.exponential-delay.initial-backoff", 1_000)?,
                max_ms: duration("restart-strategy.exponential-delay.max-backoff", 60_000)?,
                multiplier: match settings.get("restart-strategy.exponential-delay.backoff-multiplier") {
                    Some(v) => v.trim().parse().map_err(|_| {
                        plan_err(format!(
                            "SET 'restart-strategy.exponential-delay.backoff-multiplier' = '{v}': a number"
                        ))
                    })?,
                    None => 2.0,
                },
                attempts: number("restart-strategy.exponential-delay.attempts", 10)?,
            })
        }
        Some(other) => Err(plan_err(format!(
            "SET 'restart-strategy.type' = '{other}': use 'none', 'fixed-delay' or 'exponential-delay'"
        ))),
    }
}

/// `INTERVAL '5' SECOND` (and friends) in milliseconds.
pub(super) fn interval_ms(e: &SqlExpr) -> Result<i64> {
    let SqlExpr::Interval(iv) = e else {
        return Err(plan_err(format!("expected an INTERVAL, found `{e}`")));
    };
    let n: f64 = unquote(&iv.value.to_string())
        .parse()
        .map_err(|_| plan_err(format!("`{e}`: the interval's value is not a number")))?;
    let unit = match &iv.leading_field {
        Some(DateTimeField::Millisecond) | Some(DateTimeField::Milliseconds) => 1.0,
        Some(DateTimeField::Second) | Some(DateTimeField::Seconds) | None => 1_000.0,
        Some(DateTimeField::Minute) | Some(DateTimeField::Minutes) => 60_000.0,
        Some(DateTimeField::Hour) | Some(DateTimeField::Hours) => 3_600_000.0,
        Some(DateTimeField::Day) | Some(DateTimeField::Days) => 86_400_000.0,
        Some(other) => {
            return Err(plan_err(format!(
                "`{e}`: interval unit {other} is not supported"
            )))
        }
    };
    let ms = n * unit;
    if !ms.is_finite() || ms.abs() >= i64::MAX as f64 {
        return Err(plan_err(format!(
            "`{e}`: longer than weir can count in milliseconds"
        )));
    }
    Ok(ms as i64)
}

/// A duration setting such as `5 s`, `100 ms`, `1 min`.
pub(super) fn duration_ms(key: &str, v: &str) -> Result<i64> {
    let v = v.trim();
    let (n, unit) = number_and_unit(v).ok_or_else(|| {
        plan_err(format!(
            "setting `{key}` = '{v}': expected a duration such as '5 s'"
        ))
    })?;
    let f = match unit.as_str() {
        "" | "ms" | "milli" | "millis" => 1.0,
        "s" | "sec" | "second" | "seconds" => 1_000.0,
        "min" | "minute" | "minutes" => 60_000.0,
        "h" | "hour" | "hours" => 3_600_000.0,
        "d" | "day" | "days" => 86_400_000.0,
        other => {
            return Err(plan_err(format!(
                "setting `{key}` = '{v}': unknown unit `{other}`"
            )))
        }
    };
    let ms = n * f;
    // Not saturated into a number of another meaning.
    if !ms.is_finite() || ms >= i64::MAX as f64 {
        return Err(plan_err(format!(
            "setting `{key}` = '{v}': longer than weir can count in milliseconds"
        )));
    }
    Ok(ms as i64)
}
