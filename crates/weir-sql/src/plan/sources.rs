//! Source tables: columns and types, watermarks, alignment, late rows.

use super::*;

/// The alignment group of file sources read in step ([`group_files_in_step`]); the second
/// and later groups of a job are `weir-files-2`, ...
const FILES_GROUP: &str = "weir-files";

/// How far (ms of event time) a file source read in step may run ahead of the slowest.
const FILES_DRIFT_MS: i64 = 5_000;

/// `SET 'weir.files.read-in-step'`: whether file sources joined within a time bound are read in
/// step ([`group_files_in_step`]); `true` by default.
pub(super) fn files_read_in_step(settings: &BTreeMap<String, String>) -> Result<bool> {
    Ok(bool_setting(settings, "weir.files.read-in-step")?.unwrap_or(true))
}

/// Reads in step the file sources that meet at a join bounded in time
/// (`OperatorFactory::time_bound_ms`: interval and window joins, regular joins with a TTL)
/// whose every input comes from file sources that may be read so
/// ([`Planner::files_in_step`]): one alignment group per set of sources joined that way, none
/// more than 5 s of event time ahead of the slowest, sampled every millisecond. The other file
/// sources read as fast as they can: alone, a versioned or lookup table's side, or beside a
/// topic, there is nothing to keep in step. It changes no result: a row is late by its own
/// split's watermark, and an operator follows the least of its inputs'.
pub(super) fn group_files_in_step(graph: &mut JobGraph, candidates: &[usize]) {
    use weir_runtime::graph::NodeKind;
    let n = graph.nodes.len();
    let mut candidate = vec![false; n];
    for &id in candidates {
        candidate[id] = true;
    }
    // The sources whose rows reach `node`, but for a versioned or lookup table's: its rows
    // are versions to look up, never held back for the watermark.
    fn sources(graph: &JobGraph, node: usize, seen: &mut [bool], out: &mut Vec<usize>) {
        if std::mem::replace(&mut seen[node], true) {
            return;
        }
        let factory = match &graph.nodes[node].kind {
            NodeKind::Source { .. } => {
                out.push(node);
                return;
            }
            NodeKind::Operator { factory } => Some(factory),
            _ => None,
        };
        for e in graph.inputs_of(node) {
            if !factory.is_some_and(|f| f.versioned_input(e.input)) {
                sources(graph, e.from, seen, out);
            }
        }
    }
    fn root(of: &mut [usize], mut x: usize) -> usize {
        while of[x] != x {
            of[x] = of[of[x]];
            x = of[x];
        }
        x
    }
    // Sources joined by a bounded join share a root.
    let mut joined_to: Vec<usize> = (0..n).collect();
    let mut joined = vec![false; n];
    for node in &graph.nodes {
        let NodeKind::Operator { factory } = &node.kind else {
            continue;
        };
        if factory.time_bound_ms().is_none() {
            continue;
        }
        let mut srcs = Vec::new();
        sources(graph, node.id, &mut vec![false; n], &mut srcs);
        if srcs.len() < 2 || !srcs.iter().all(|&s| candidate[s]) {
            continue;
        }
        for &s in &srcs {
            joined[s] = true;
            let (a, b) = (root(&mut joined_to, s), root(&mut joined_to, srcs[0]));
            joined_to[a] = b;
        }
    }
    let mut groups: HashMap<usize, String> = HashMap::new();
    for (id, joined) in joined.into_iter().enumerate() {
        if !joined {
            continue;
        }
        let k = groups.len();
        let group = (groups.entry(root(&mut joined_to, id)))
            .or_insert_with(|| match k {
                0 => FILES_GROUP.to_string(),
                k => format!("{FILES_GROUP}-{}", k + 1),
            })
            .clone();
        if let NodeKind::Source { watermarks, .. } = &mut graph.nodes[id].kind {
            let mut al = WatermarkAlignment::new(&group, FILES_DRIFT_MS);
            al.update_interval_ms = 1;
            al.allow_unaligned_source_splits = true;
            watermarks.alignment = Some(al);
        }
    }
}

/// A table's physical columns (those read or written) with their Arrow types, in order.
pub(crate) fn physical_columns(t: &TableDef) -> Result<Vec<(String, DataType)>> {
    t.columns
        .iter()
        .filter_map(|c| match c {
            ColumnDef::Physical { name, data_type } => {
                Some(arrow_type(data_type).map(|d| (name.clone(), d)))
            }
            ColumnDef::Computed { .. } => None,
        })
        .collect()
}

/// The SQL type of a column as an Arrow type.
pub(super) fn arrow_type(t: &sqlparser::ast::DataType) -> Result<DataType> {
    use sqlparser::ast::DataType as S;
    use sqlparser::ast::ExactNumberInfo as E;
    Ok(match t {
        S::BigInt(_) | S::Int8(_) | S::Int64 => DataType::Int64,
        S::Int(_) | S::Integer(_) | S::Int4(_) | S::Int32 => DataType::Int32,
        S::SmallInt(_) | S::Int2(_) | S::Int16 => DataType::Int16,
        S::TinyInt(_) => DataType::Int8,
        S::Date => DataType::Date32,
        // TIME is TIME(0), whole seconds, as in Flink; TIME(1) to TIME(3) keep milliseconds.
        S::Time(None | Some(0), _) => DataType::Time32(TimeUnit::Second),
        S::Time(Some(p), _) if *p <= 3 => DataType::Time32(TimeUnit::Millisecond),
        S::Double(_) | S::DoublePrecision | S::Float64 => DataType::Float64,
        S::Float(_) | S::Real | S::Float32 => DataType::Float32,
        S::Boolean | S::Bool => DataType::Boolean,
        S::String(_) | S::Varchar(_) | S::Text | S::Char(_) | S::CharacterVarying(_) => DataType::Utf8,
        S::Decimal(info) | S::Numeric(info) | S::Dec(info) => match info {
            E::PrecisionAndScale(p, s) => DataType::Decimal128(*p as u8, *s as i8),
            E::Precision(p) => DataType::Decimal128(*p as u8, 0),
            E::None => DataType::Decimal128(10, 0),
        },
        S::Timestamp(_, _) => DataType::Timestamp(TimeUnit::Millisecond, None),
        // ARRAY<T> (JSON files hold them, of BIGINT, INT, DOUBLE, BOOLEAN or STRING).
        S::Array(sqlparser::ast::ArrayElemTypeDef::AngleBracket(item)) => {
            DataType::new_list(arrow_type(item)?, true)
        }
        S::Custom(name, _) if name.to_string().eq_ignore_ascii_case("TIMESTAMP_LTZ") => {
            DataType::Timestamp(TimeUnit::Millisecond, Some("+00:00".into()))
        }
        other => return Err(plan_err(format!("column type {other} is not supported yet; use BIGINT, INT, SMALLINT, TINYINT, DOUBLE, FLOAT, BOOLEAN, STRING, DECIMAL(p, s), DATE, TIME, TIME(3), TIMESTAMP(3), TIMESTAMP_LTZ(3) or ARRAY<T>"))),
    })
}

impl Planner {
    /// Sends a source's late rows (`stream`, the source table `t`'s rows set aside by
    /// `drop_late`) toward the table its 'weir.late-rows' option names, by column name.
    pub(super) fn route_late_rows(
        &self,
        t: &TableDef,
        late_table: &str,
        stream: Stream,
    ) -> Result<()> {
        let target = self.table(&ObjectName::from(vec![Ident::new(late_table)]))?;
        let schema = stream.schema();
        let mut cols = Vec::new();
        for (name, ty) in physical_columns(target)? {
            let Some(field) = schema
                .fields()
                .iter()
                .find(|f| f.name().eq_ignore_ascii_case(&name))
            else {
                return Err(plan_err(format!(
                    "table `{}`: '{}' = '{late_table}', but `{late_table}` has a column `{name}` that `{}` does not ({}); the late-row table takes columns of the source table by name",
                    t.name,
                    connectors::LATE_ROWS,
                    t.name,
                    schema.fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>().join(", ")
                )));
            };
            let e = SqlScalar::column(field.name());
            let e = if field.data_type() == &ty {
                e
            } else {
                // As INSERT converts: in the session zone, between TIMESTAMP_LTZ and local times.
                crate::zone::cast_for_sink(e, field.data_type(), &ty, &self.zone).map_err(|m| {
                    plan_err(format!(
                        "table `{}`: its late rows into `{late_table}`, column `{name}`: {m}",
                        t.name
                    ))
                })?
            };
            cols.push((name, e));
        }
        let rows = stream.apply("calc", Arc::new(Calc::project(cols)));
        self.late_rows
            .borrow_mut()
            .entry(target.name.to_lowercase())
            .or_insert_with(|| (target.name.clone(), Vec::new()))
            .1
            .push(rows);
        Ok(())
    }

    /// One sink per late-row table, fed by every source read that sends it rows. Returns the
    /// sinks' table names.
    pub(super) fn sink_late_rows(&self) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for (key, (name, streams)) in self.late_rows.borrow().iter() {
            let t = &self.tables[key];
            let (factory, parallelism) = self.sink_factory(t, false)?;
            let rows = match streams.as_slice() {
                [one] => one.clone(),
                [first, rest @ ..] => first.union(rest),
                [] => continue,
            };
            rows.sink_arc(name.clone(), factory, parallelism);
            names.push(name.clone());
        }
        Ok(names)
    }

    /// Whether a source may be read in step with others ([`group_files_in_step`] groups it only
    /// where that pays): a `filesystem` table of one file, with event time and no alignment
    /// group of its own, unless `SET 'weir.files.read-in-step' = 'false'`. A file holds history, which its source reads
    /// as fast as it can: the source of a smaller file runs ahead in event time, and a join of
    /// the two holds its rows until the other side catches up (the fixture's interval join held
    /// 240 k rows instead of about 50 k, for 1.3 times the CPU).
    fn files_in_step(&self, t: &TableDef) -> bool {
        let file =
            (t.options.get("connector")).is_some_and(|c| c.eq_ignore_ascii_case("filesystem"));
        let one_file = (t.options.get("path")).is_some_and(|p| std::path::Path::new(p).is_file());
        self.read_files_in_step && file && one_file && t.watermark.is_some()
    }

    /// A table as a source relation: physical columns read, computed columns added.
    pub(super) fn source(&self, t: &TableDef, alias: &str) -> Result<Rel> {
        let physical = physical_columns(t)?;
        // Event time: the WATERMARK column, or the physical column a computed one converts.
        let (mut opts, time_columns) = match &t.watermark {
            None => (SourceOptions::none(), Vec::new()),
            Some((wcol, wexpr)) => {
                let strategy = match wexpr {
                    SqlExpr::BinaryOp { left, op: BinaryOperator::Minus, right } if is_ident(left, wcol) => {
                        WatermarkStrategy::bounded(interval_ms(right)?)
                    }
                    e if is_ident(e, wcol) => WatermarkStrategy::Monotonous,
                    other => {
                        return Err(plan_err(format!(
                            "table `{}`: WATERMARK FOR {wcol} AS {other}: weir takes `{wcol} - INTERVAL 'n' SECOND` or `{wcol}`",
                            t.name
                        )))
                    }
                };
                let physical_col = match t.columns.iter().find(|c| col_name(c).eq_ignore_ascii_case(wcol)) {
                    Some(ColumnDef::Physical { name, .. }) => name.clone(),
                    Some(ColumnDef::Computed { expr, .. }) => match expr.as_ref() {
                        SqlExpr::Function(f) if f.name.to_string().eq_ignore_ascii_case("TO_TIMESTAMP_LTZ") => {
                            let args = function_args(&f.args)?;
                            match (args.first(), args.get(1)) {
                                (Some(SqlExpr::Identifier(i)), Some(p)) if p.to_string() == "3" => i.value.clone(),
                                _ => return Err(plan_err(format!("table `{}`: the time attribute `{wcol}` must be TO_TIMESTAMP_LTZ(column, 3)", t.name))),
                            }
                        }
                        other => return Err(plan_err(format!("table `{}`: the time attribute `{wcol}` = {other}: weir takes a BIGINT epoch-ms or TIMESTAMP column, or TO_TIMESTAMP_LTZ(column, 3)", t.name))),
                    },
                    None => return Err(plan_err(format!("table `{}`: WATERMARK FOR `{wcol}`, which is not a column", t.name))),
                };
                let mut attrs = vec![table_column(t, wcol)];
                if !physical_col.eq_ignore_ascii_case(wcol) {
                    attrs.push(table_column(t, &physical_col));
                }
                (
                    SourceOptions::event_time(&physical_col, 0).strategy(strategy),
                    attrs,
                )
            }
        };
        // A table's own timeout, else the job's (Flink's table.exec.source.idle-timeout is
        // the job-wide one).
        let idle = self
            .setting("scan.watermark.idle-timeout", t)
            .map(|v| ("scan.watermark.idle-timeout", v))
            .or_else(|| {
                (self.settings.get("table.exec.source.idle-timeout"))
                    .map(|v| ("table.exec.source.idle-timeout", v.clone()))
            });
        if let Some((key, v)) = idle {
            opts = opts.idle_timeout_ms(duration_ms(key, &v)?);
        }
        let own_group = self.setting("scan.watermark.alignment.group", t);
        let in_step = own_group.is_none() && self.files_in_step(t);
        if let Some(group) = own_group {
            if group.starts_with(FILES_GROUP) {
                return Err(plan_err(format!(
                    "table `{}`: 'scan.watermark.alignment.group' = '{group}': names starting \
                     with `{FILES_GROUP}` are weir's own (files read in step); choose another",
                    t.name
                )));
            }
            let drift = self
                .setting("scan.watermark.alignment.max-drift", t)
                .ok_or_else(|| {
                    plan_err(format!(
                        "table `{}`: an alignment group needs 'scan.watermark.alignment.max-drift'",
                        t.name
                    ))
                })?;
            let mut al = WatermarkAlignment::new(
                &group,
                duration_ms("scan.watermark.alignment.max-drift", &drift)?,
            );
            if let Some(u) = self.setting("scan.watermark.alignment.update-interval", t) {
                al.update_interval_ms =
                    duration_ms("scan.watermark.alignment.update-interval", &u)?;
            }
            if let Some(b) = self.setting("scan.watermark.alignment.buffer-size", t) {
                al.buffer_size = b.parse().map_err(|_| {
                    plan_err(format!(
                        "'scan.watermark.alignment.buffer-size' = '{b}': not a number"
                    ))
                })?;
            }
            let key = "pipeline.watermark-alignment.allow-unaligned-source-splits";
            al.allow_unaligned_source_splits =
                connectors::parse_bool(&t.name, key, self.setting(key, t).as_deref())?
                    .unwrap_or(false);
            opts = opts.aligned(al);
        }
        let proc_attrs: Vec<String> = t
            .columns
            .iter()
            .filter_map(|c| match c {
                ColumnDef::Computed { name, expr } if is_proctime(expr) => Some(name.clone()),
                _ => None,
            })
            .collect();
        let event_time_column = opts.watermarks.event_time.clone();
        let mut stream = match hybrid::parts(t)? {
            Some(parts) => self.hybrid_stream(t, parts, &physical, opts)?,
            None => {
                let factory =
                    connectors::source_factory(t, &physical, event_time_column.as_deref())?;
                if in_step {
                    self.in_step.borrow_mut().push(self.job.node_count());
                }
                self.job.source_arc(t.name.clone(), factory, opts)
            }
        };
        if let Some(late_table) = t.options.get(connectors::LATE_ROWS) {
            if event_time_column.is_none() {
                return Err(plan_err(format!(
                    "table `{}`: '{}' needs a WATERMARK: rows are late by their event time",
                    t.name,
                    connectors::LATE_ROWS
                )));
            }
            // Late at the source is late everywhere after it: rows behind their split's
            // watermark go to the table instead of into the query.
            stream = stream.drop_late();
            // The same rows are late in every read of the table: one read sends them.
            if self.late_routed.borrow_mut().insert(t.name.to_lowercase()) {
                self.route_late_rows(t, late_table, stream.late_rows())?;
            }
        }
        // Physical columns, then computed ones.
        let base = Rel {
            primary_key: t.primary_key.iter().map(|k| table_column(t, k)).collect(),
            upsert_keys: None,
            changes: None,
            proc_time_attrs: proc_attrs.clone(),
            stream: stream.clone(),
            scope: physical
                .iter()
                .map(|(n, _)| ScopeEntry {
                    qualifier: Some(alias.to_string()),
                    name: n.clone(),
                    column: n.clone(),
                })
                .collect(),
            time_columns: time_columns.clone(),
            alias: alias.to_string(),
            zone: self.zone.clone(),
        };
        let computed: Vec<(String, SqlScalar)> = t
            .columns
            .iter()
            .filter_map(|c| match c {
                ColumnDef::Computed { name, expr } if !is_proctime(expr) => {
                    Some(scalar(expr, &base).map(|e| (name.clone(), e)))
                }
                _ => None,
            })
            .collect::<Result<_>>()?;
        if computed.is_empty() {
            return Ok(base);
        }
        let mut cols: Vec<(String, SqlScalar)> = (physical.iter())
            .map(|(n, _)| (n.clone(), SqlScalar::column(n)))
            .collect();
        if is_upsert(t) {
            cols.push((OP_COLUMN.into(), SqlScalar::column(OP_COLUMN)));
        }
        cols.extend(computed.iter().cloned());
        let mut scope = base.scope.clone();
        scope.extend(computed.iter().map(|(n, _)| ScopeEntry {
            qualifier: Some(alias.to_string()),
            name: n.clone(),
            column: n.clone(),
        }));
        Ok(Rel {
            primary_key: t.primary_key.iter().map(|k| table_column(t, k)).collect(),
            upsert_keys: None,
            changes: None,
            proc_time_attrs: proc_attrs,
            stream: stream.apply("calc", Arc::new(Calc::project(cols))),
            scope,
            time_columns,
            alias: alias.to_string(),
            zone: self.zone.clone(),
        })
    }
}
