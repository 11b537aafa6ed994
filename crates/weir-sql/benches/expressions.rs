//! The fixture queries' expressions evaluated two ways on the same 8,192-row batch: weir-core's
//! `Expr` (the Rust builder API's language) and DataFusion's physical expressions (what SQL
//! jobs run since expressions are planned by DataFusion). Compare the two in one run:
//!
//!     cargo bench -p weir-sql --bench expressions

use std::sync::Arc;

use arrow_array::{Decimal128Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use weir_core::expr::{col, lit, Expr, ScalarFunction};
use weir_sql::expr::SqlScalar;

const ROWS: usize = 8192;

fn batch() -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("ts", DataType::Int64, false),
        Field::new("amount", DataType::Decimal128(12, 2), true),
        Field::new("rate", DataType::Decimal128(12, 6), true),
        Field::new(
            "window_start",
            DataType::Timestamp(TimeUnit::Millisecond, Some("+00:00".into())),
            false,
        ),
    ]));
    let ts: Vec<i64> = (0..ROWS as i64)
        .map(|i| 1_704_067_200_000 + i * 37)
        .collect();
    let amount = Decimal128Array::from_iter_values((0..ROWS as i128).map(|i| 10_000 + i))
        .with_precision_and_scale(12, 2)
        .unwrap();
    let rate = Decimal128Array::from_iter_values((0..ROWS as i128).map(|i| 1_000_000 + i * 7))
        .with_precision_and_scale(12, 6)
        .unwrap();
    let window_start = arrow_array::TimestampMillisecondArray::from(
        ts.iter().map(|t| t - t % 60_000).collect::<Vec<_>>(),
    )
    .with_timezone("+00:00");
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(ts)),
            Arc::new(amount),
            Arc::new(rate),
            Arc::new(window_start),
        ],
    )
    .unwrap()
}

fn function(function: ScalarFunction, args: Vec<Expr>) -> Expr {
    Expr::Function { function, args }
}

fn expressions(c: &mut Criterion) {
    let b = batch();
    let cases: [(&str, Expr, &str); 3] = [
        (
            "to_timestamp_ltz",
            function(ScalarFunction::ToTimestampLtz, vec![col("ts"), lit(3)]),
            "TO_TIMESTAMP_LTZ(`ts`, 3)",
        ),
        (
            "decimal_product",
            col("amount").mul(col("rate")),
            "`amount` * `rate`",
        ),
        (
            "window_start_ms",
            function(
                ScalarFunction::UnixTimestamp,
                vec![function(
                    ScalarFunction::DateFormat,
                    vec![col("window_start"), lit("yyyy-MM-dd HH:mm:ss")],
                )],
            )
            .mul(lit(1000)),
            "UNIX_TIMESTAMP(DATE_FORMAT(`window_start`, 'yyyy-MM-dd HH:mm:ss')) * 1000",
        ),
    ];
    let mut g = c.benchmark_group("expressions");
    g.throughput(Throughput::Elements(ROWS as u64));
    for (name, weir, sql) in cases {
        let planned = SqlScalar::new(sql).plan(&b.schema()).unwrap();
        // Both compute the same values (a DECIMAL product's precision differs by one).
        let text = |a: arrow_array::ArrayRef| arrow_cast::cast(&a, &DataType::Utf8).unwrap();
        assert_eq!(
            text(weir.evaluate(&b).unwrap()).as_ref(),
            text(planned.evaluate(&b).unwrap()).as_ref(),
            "{name}"
        );
        g.bench_function(format!("{name}/weir_expr"), |x| {
            x.iter(|| weir.evaluate(&b).unwrap())
        });
        g.bench_function(format!("{name}/datafusion"), |x| {
            x.iter(|| planned.evaluate(&b).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, expressions);
criterion_main!(benches);
