//! Source tables: columns and types, watermarks, alignment, late rows.

use super::*;

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
        if let Some(group) = self.setting("scan.watermark.alignment.group", t) {
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
