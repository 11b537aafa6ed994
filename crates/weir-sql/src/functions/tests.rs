//! The functions through SQL, as the planner runs them; expected values are Flink 2.3's.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray, TimestampMillisecondArray};
use arrow_schema::{DataType, Field, Schema, TimeUnit};

use crate::expr::SqlScalar;

fn batch() -> RecordBatch {
    let ltz = DataType::Timestamp(TimeUnit::Millisecond, Some("+00:00".into()));
    let schema = Arc::new(Schema::new(vec![
        Field::new("rt", ltz, true),
        Field::new("t", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("n", DataType::Int64, true),
        Field::new("s", DataType::Utf8, true),
    ]));
    // 2024-01-31 10:00:00 and NULLs.
    let ms = 1_706_695_200_000;
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(TimestampMillisecondArray::from(vec![Some(ms), None]).with_timezone("+00:00")),
            Arc::new(TimestampMillisecondArray::from(vec![Some(ms + 1500), None])),
            Arc::new(Int64Array::from(vec![Some(2), None])),
            Arc::new(StringArray::from(vec![Some("a,b,c"), None])),
        ],
    )
    .unwrap()
}

/// The type and the text of each row (NULL as "NULL").
fn eval(sql: &str) -> (DataType, Vec<String>) {
    let b = batch();
    let p = SqlScalar::new(sql)
        .plan(&b.schema())
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let a = p.evaluate(&b).unwrap();
    let opts = arrow_cast::display::FormatOptions::default().with_null("NULL");
    let f = arrow_cast::display::ArrayFormatter::try_new(a.as_ref(), &opts).unwrap();
    (
        p.data_type().clone(),
        (0..a.len()).map(|i| f.value(i).to_string()).collect(),
    )
}

/// The first row's text.
fn one(sql: &str) -> String {
    eval(sql).1.remove(0)
}

fn plan_error(sql: &str) -> String {
    let b = batch();
    SqlScalar::new(sql)
        .plan(&b.schema())
        .unwrap_err()
        .to_string()
}

#[test]
fn timestampadd_keeps_the_type_and_clamps_months() {
    let (t, v) = eval("TIMESTAMPADD(MINUTE, 5, `rt`)");
    assert_eq!(
        t,
        DataType::Timestamp(TimeUnit::Millisecond, Some("+00:00".into()))
    );
    assert_eq!(v, ["2024-01-31T10:05:00Z", "NULL"]);
    let (t, v) = eval("TIMESTAMPADD(MONTH, `n` - 1, `t`)");
    assert_eq!(t, DataType::Timestamp(TimeUnit::Millisecond, None));
    assert_eq!(v, ["2024-02-29T10:00:01.500", "NULL"]);
    assert_eq!(
        one("TIMESTAMPADD(year, 1, TIMESTAMP '2024-02-29 10:00:00')"),
        "2025-02-28T10:00:00"
    );
    assert_eq!(
        one("TIMESTAMPADD(QUARTER, 1, `t`)"),
        "2024-04-30T10:00:01.500"
    );
    assert_eq!(
        one("TIMESTAMPADD(WEEK, -1, `t`)"),
        "2024-01-24T10:00:01.500"
    );
    assert_eq!(
        one("TIMESTAMPADD(SQL_TSI_DAY, 1, `t`)"),
        "2024-02-01T10:00:01.500"
    );
    assert_eq!(
        one("TIMESTAMPADD(MILLISECOND, 5, `t`)"),
        "2024-01-31T10:00:01.505"
    );
    assert_eq!(
        one("TIMESTAMPADD(SECOND, 3000000000, `t`)"),
        "2119-02-24T15:20:01.500"
    );
    assert_eq!(one("TIMESTAMPADD(HOUR, CAST(NULL AS INT), `t`)"), "NULL");
    let (t, v) = eval("TIMESTAMPADD(DAY, 5, CAST('2024-01-31' AS DATE))");
    assert_eq!((t, v[0].as_str()), (DataType::Date32, "2024-02-05"));
    let (t, v) = eval("TIMESTAMPADD(SECOND, 5, CAST('2024-01-31' AS DATE))");
    assert_eq!(
        (t, v[0].as_str()),
        (
            DataType::Timestamp(TimeUnit::Millisecond, None),
            "2024-01-31T00:00:05"
        )
    );
}

#[test]
fn timestampdiff_truncates_toward_zero_as_an_int() {
    let (t, v) = eval("TIMESTAMPDIFF(SECOND, `t`, TIMESTAMP '2024-01-31 09:59:58')");
    assert_eq!((t, v), (DataType::Int32, vec!["-3".into(), "NULL".into()]));
    let d = |u: &str, a: &str, b: &str| {
        one(&format!(
            "TIMESTAMPDIFF({u}, TIMESTAMP '{a}', TIMESTAMP '{b}')"
        ))
    };
    assert_eq!(
        d("MINUTE", "2024-01-31 10:00:00", "2024-01-31 10:05:59"),
        "5"
    );
    assert_eq!(
        d(
            "SECOND",
            "2024-01-01 10:00:00.999",
            "2024-01-01 10:00:01.001"
        ),
        "0"
    );
    assert_eq!(
        d("SECOND", "2024-01-01 10:00:00", "2024-01-01 09:59:58.500"),
        "-1"
    );
    assert_eq!(
        d(
            "MILLISECOND",
            "2024-01-01 10:00:00",
            "2024-01-01 09:59:58.500"
        ),
        "-1500"
    );
    assert_eq!(
        d("MICROSECOND", "2024-01-01 10:00:00", "2024-01-01 10:00:01"),
        "1000000"
    );
    assert_eq!(d("WEEK", "2024-01-01 10:00:00", "2024-01-15 09:59:59"), "1");
    assert_eq!(d("DAY", "2024-01-01 10:00:00", "2024-01-03 09:59:59"), "1");
    assert_eq!(
        d("MONTH", "2024-01-31 10:00:00", "2024-02-29 10:00:00"),
        "1"
    );
    assert_eq!(
        d("MONTH", "2024-01-31 10:00:00", "2024-02-29 09:00:00"),
        "0"
    );
    assert_eq!(
        d("MONTH", "2024-03-29 10:00:00", "2024-02-29 09:00:00"),
        "-2"
    );
    assert_eq!(
        d("YEAR", "2025-03-31 10:00:00", "2024-02-29 09:00:00"),
        "-1"
    );
    assert_eq!(
        d("QUARTER", "2025-03-31 10:00:00", "2024-02-29 09:00:00"),
        "-4"
    );
    assert_eq!(
        d("QUARTER", "2024-01-31 10:00:00", "2024-12-31 10:00:00"),
        "3"
    );
    // Flink's INT wraps.
    assert_eq!(
        d("SECOND", "1970-01-01 00:00:00", "2100-01-01 00:00:00"),
        "-192522496"
    );
    let (t, v) = eval("TIMESTAMPDIFF(NANOSECOND, `t`, `t` + INTERVAL '1' SECOND)");
    assert_eq!((t, v[0].as_str()), (DataType::Int64, "1000000000"));
    assert_eq!(
        one("TIMESTAMPDIFF(SECOND, `rt`, TIMESTAMPADD(HOUR, 1, `rt`))"),
        "3600"
    );
    assert_eq!(
        one("TIMESTAMPDIFF(DAY, CAST('2024-01-01' AS DATE), CAST('2024-01-05' AS DATE))"),
        "4"
    );
}

#[test]
fn timestamp_unit_and_type_errors_name_the_function() {
    let e = plan_error("TIMESTAMPADD(FORTNIGHT, 1, `t`)");
    assert!(
        e.contains("TIMESTAMPADD") && e.contains("unknown unit FORTNIGHT") && e.contains("MINUTE"),
        "{e}"
    );
    let e = plan_error("TIMESTAMPADD(MICROSECOND, 1, `t`)");
    assert!(e.contains("MICROSECOND is not supported"), "{e}");
    let e = plan_error("TIMESTAMPADD(SECOND, 2.5, `t`)");
    assert!(
        e.contains("TIMESTAMPADD argument 2 (INT count) is Decimal128"),
        "{e}"
    );
    let e = plan_error("TIMESTAMPADD(SECOND, 1, `s`)");
    assert!(
        e.contains("argument 3 (TIMESTAMP) is Utf8")
            && e.contains("TIMESTAMPADD(unit, INT count, TIMESTAMP)"),
        "{e}"
    );
    let e = plan_error("TIMESTAMPDIFF(SECOND, `t`)");
    assert!(e.contains("TIMESTAMPDIFF takes 3 arguments, got 2"), "{e}");
    let e = plan_error("TIMESTAMPDIFF(SECOND, `rt`, `t`)");
    assert!(e.contains("two TIMESTAMPs or two TIMESTAMP_LTZs"), "{e}");
    let e = plan_error("TIMESTAMPDIFF(`s`, `t`, `t`)");
    assert!(e.contains("must be a unit keyword"), "{e}");
}

#[test]
fn to_timestamp_reads_as_flink() {
    let (t, v) = eval("TO_TIMESTAMP(`s`)");
    assert_eq!(
        (t, v),
        (
            DataType::Timestamp(TimeUnit::Millisecond, None),
            vec!["NULL".into(), "NULL".into()]
        )
    );
    assert_eq!(
        one("TO_TIMESTAMP('2024-01-31 10:00:00.1234')"),
        "2024-01-31T10:00:00.123"
    );
    assert_eq!(one("TO_TIMESTAMP('2024-1-3 1:2:3')"), "2024-01-03T01:02:03");
    assert_eq!(one("TO_TIMESTAMP('2024-01-31T10:00:00')"), "NULL");
    assert_eq!(
        one("TO_TIMESTAMP('31/01/2024 10:00', 'dd/MM/yyyy HH:mm')"),
        "2024-01-31T10:00:00"
    );
    assert_eq!(
        one("TO_TIMESTAMP('2024-01-31 10:00:00', 'yyyy-MM-dd')"),
        "2024-01-31T10:00:00"
    );
    assert_eq!(
        one("TO_TIMESTAMP('2024-01-31', CAST(NULL AS STRING))"),
        "NULL"
    );
    let (_, v) =
        eval("TO_TIMESTAMP(CASE WHEN `n` = 2 THEN '2024' END, CASE WHEN `n` = 2 THEN 'yyyy' END)");
    assert_eq!(v, ["2024-01-01T00:00:00", "NULL"]);
    let e = plan_error("TO_TIMESTAMP(`n`)");
    assert!(e.contains("TO_TIMESTAMP argument 1 (STRING) is Int64; expected TO_TIMESTAMP(STRING[, STRING pattern])"), "{e}");
}

#[test]
fn from_unixtime_and_date_format_on_text() {
    let (t, v) = eval("FROM_UNIXTIME(`n` + 1706695198)");
    assert_eq!(
        (t, v),
        (
            DataType::Utf8,
            vec!["2024-01-31 10:00:00".into(), "NULL".into()]
        )
    );
    assert_eq!(one("FROM_UNIXTIME(-1)"), "1969-12-31 23:59:59");
    assert_eq!(
        one("FROM_UNIXTIME(1706695200, 'yyyyMMdd HH')"),
        "20240131 10"
    );
    assert_eq!(
        one("FROM_UNIXTIME(1706695200, CAST(NULL AS STRING))"),
        "NULL"
    );
    assert_eq!(
        one("FROM_UNIXTIME(CAST(1706695200 AS INT))"),
        "2024-01-31 10:00:00"
    );
    // Java patterns: quoted text, day and AM/PM names, the 12-hour clock.
    assert_eq!(
        one("FROM_UNIXTIME(1706713445, 'EEE EEEE a hh h ''x''''s'' %')"),
        "Wed Wednesday PM 03 3 x's %"
    );
    assert_eq!(
        one("DATE_FORMAT(TIMESTAMP '2024-01-31 00:04:05.006', 'yyyy-MM-dd''T''HH:mm:ss.SSS hh a')"),
        "2024-01-31T00:04:05.006 12 AM"
    );
    let (_, v) = eval("FROM_UNIXTIME(`n`, CASE WHEN `n` = 2 THEN 'ss' END)");
    assert_eq!(v, ["02", "NULL"]);
    let e = plan_error("FROM_UNIXTIME(1.5)");
    assert!(
        e.contains("FROM_UNIXTIME argument 1 (BIGINT epoch seconds) is Decimal128"),
        "{e}"
    );

    let (t, v) = eval("DATE_FORMAT(CASE WHEN `n` = 2 THEN '2024-01-31 10:00:00.123' END, 'yyyy-MM-dd HH:mm:ss.SSS')");
    assert_eq!(
        (t, v),
        (
            DataType::Utf8,
            vec!["2024-01-31 10:00:00.000".into(), "NULL".into()]
        )
    );
    assert_eq!(
        one("DATE_FORMAT('2024-02-30 10:00:00', 'yyyy-MM-dd')"),
        "2024-03-01"
    );
    assert_eq!(one("DATE_FORMAT('2024-01-31', 'yyyy')"), "NULL");
    assert_eq!(one("DATE_FORMAT('garbage', 'yyyy')"), "NULL");
}

/// SPLIT as Flink 2.3 gives it (run on Flink: an ARRAY<STRING>, empty parts kept, an empty
/// delimiter splitting every character apart, an empty text an empty array).
#[test]
fn split_as_flink() {
    let (t, v) = eval("SPLIT(`s`, ',')");
    assert_eq!(t, DataType::new_list(DataType::Utf8, true));
    assert_eq!(v, ["[a, b, c]", "NULL"]);
    for (sql, want) in [
        ("SPLIT('a,b,,c', ',')", "[a, b, , c]"),
        ("SPLIT(',a,', ',')", "[, a, ]"),
        ("SPLIT('abc', '')", "[a, b, c]"),
        ("SPLIT('', ',')", "[]"),
        ("SPLIT('a::b', '::')", "[a, b]"),
        ("SPLIT(CAST(NULL AS STRING), ',')", "NULL"),
        ("SPLIT('a,b', CAST(NULL AS STRING))", "NULL"),
        // CAST of an ARRAY to STRING, as Flink writes it.
        ("CAST(SPLIT('a;b', ';') AS STRING)", "[a, b]"),
        ("CAST(SPLIT('', ';') AS STRING)", "[]"),
        ("CAST(SPLIT(';x', ';') AS STRING)", "[, x]"),
    ] {
        assert_eq!(one(sql), want, "{sql}");
    }
    assert!(
        plan_error("SPLIT(`n`, ',')").contains("SPLIT takes SPLIT(STRING text, STRING delimiter)")
    );
}

#[test]
fn split_index_as_flink() {
    let (t, v) = eval("SPLIT_INDEX(`s`, ',', `n`)");
    assert_eq!((t, v), (DataType::Utf8, vec!["c".into(), "NULL".into()]));
    for (sql, want) in [
        ("SPLIT_INDEX('a,b,c', ',', 0)", "a"),
        ("SPLIT_INDEX('a,b,c', ',', 3)", "NULL"),
        ("SPLIT_INDEX('a,b,c', ',', -1)", "NULL"),
        ("SPLIT_INDEX('a,,c', ',', 1)", ""),
        ("SPLIT_INDEX('a,', ',', 1)", ""),
        ("SPLIT_INDEX('', ',', 0)", "NULL"),
        ("SPLIT_INDEX('a:::b', '::', 1)", ":b"),
        ("SPLIT_INDEX('a b  c', '', 2)", ""),
        ("SPLIT_INDEX('abc', '', 0)", "abc"),
        ("SPLIT_INDEX('a,b', 44, 1)", "b"),
        ("SPLIT_INDEX('a,b', CAST(NULL AS STRING), 0)", "NULL"),
        ("SPLIT_INDEX('a,b', ',', CAST(NULL AS INT))", "NULL"),
    ] {
        assert_eq!(one(sql), want, "{sql}");
    }
    let e = plan_error("SPLIT_INDEX(`n`, ',', 0)");
    assert!(
        e.contains("SPLIT_INDEX argument 1 (STRING) is Int64"),
        "{e}"
    );
}

#[test]
fn regexp_extract_as_flink() {
    let (t, v) = eval("REGEXP_EXTRACT(`s`, '[a-z],([a-z])', 1)");
    assert_eq!((t, v), (DataType::Utf8, vec!["b".into(), "NULL".into()]));
    for (sql, want) in [
        ("REGEXP_EXTRACT('foo123bar456', '[0-9]+')", "123"),
        (
            "REGEXP_EXTRACT('foo123bar456', '([a-z]+)([0-9]+)', 2)",
            "123",
        ),
        (
            "REGEXP_EXTRACT('foo123bar456', '([a-z]+)([0-9]+)', 3)",
            "NULL",
        ),
        (
            "REGEXP_EXTRACT('foo123bar456', '([a-z]+)([0-9]+)', -1)",
            "NULL",
        ),
        ("REGEXP_EXTRACT('foo', 'x(y)?')", "NULL"),
        ("REGEXP_EXTRACT('foo', 'f(x)?', 1)", "NULL"),
        ("REGEXP_EXTRACT('foo', '[')", "NULL"),
        ("REGEXP_EXTRACT('', '^$')", ""),
        ("REGEXP_EXTRACT('aBc', '(?i)b')", "B"),
        ("REGEXP_EXTRACT('a1b2', '(\\d)(?=b)')", "1"),
        ("REGEXP_EXTRACT('abcabc', '(a)(b)?c\\1', 1)", "a"),
        ("REGEXP_EXTRACT('a', 'a', CAST(NULL AS INT))", "NULL"),
    ] {
        assert_eq!(one(sql), want, "{sql}");
    }
}

#[test]
fn json_value_as_flink() {
    let (t, v) =
        eval("JSON_VALUE(CASE WHEN `n` = 2 THEN '{\"a\": {\"b\": [1.50, true]}}' END, '$.a.b[0]')");
    assert_eq!((t, v), (DataType::Utf8, vec!["1.50".into(), "NULL".into()]));
    assert_eq!(one("JSON_VALUE('{\"a\": 1}', '$.b')"), "NULL");
    assert_eq!(one("JSON_VALUE('{\"a\": 1', '$.a')"), "NULL");
    let (_, v) = eval("JSON_VALUE('{\"a\": \"x\"}', CASE WHEN `n` = 2 THEN '$.a' ELSE '$[*]' END)");
    assert_eq!(v, ["x", "NULL"]);
    let e = plan_error("JSON_VALUE(`s`, '$.a[*]')");
    assert!(
        e.contains("JSON_VALUE path '$.a[*]' is not supported"),
        "{e}"
    );
    // RETURNING: the value as that type, NULL when it is not one.
    assert_eq!(
        one("JSON_VALUE('{\"a\": 7}', '$.a' RETURNING INT) + 1"),
        "8"
    );
    assert_eq!(
        one("JSON_VALUE('{\"a\": \"x\"}', '$.a' RETURNING INT)"),
        "NULL"
    );
    assert_eq!(
        one("JSON_VALUE('{\"a\": true}', '$.a' RETURNING BOOLEAN)"),
        "true"
    );
    assert_eq!(
        one("JSON_VALUE('{\"a\": 2}', '$.a' RETURNING DOUBLE)"),
        "2.0"
    );
}

#[test]
fn current_watermark_outside_a_table_with_a_time_attribute_is_refused_by_name() {
    let e = plan_error("CURRENT_WATERMARK(`rt`)");
    assert!(
        e.contains("CURRENT_WATERMARK takes the table's time attribute"),
        "{e}"
    );
}

#[test]
fn concat_is_null_when_an_argument_is_null_and_concat_ws_skips_nulls() {
    // Flink: CONCAT returns NULL if any argument is NULL; CONCAT_WS skips NULL arguments and
    // is NULL only for a NULL separator.
    assert_eq!(
        eval("CONCAT('x', s, '-')"),
        (DataType::Utf8, vec!["xa,b,c-".into(), "NULL".into()])
    );
    assert_eq!(eval("CONCAT(s)").1, vec!["a,b,c", "NULL"]);
    assert_eq!(eval("CONCAT('n=', n)").1, vec!["n=2", "NULL"]);
    assert_eq!(
        eval("CONCAT_WS('/', 'x', s, 'y')").1,
        vec!["x/a,b,c/y", "x/y"]
    );
    assert_eq!(eval("CONCAT_WS(s, 'x', 'y')").1, vec!["xa,b,cy", "NULL"]);
    assert_eq!(eval("'x' || s").1, vec!["xa,b,c", "NULL"]);
}

#[test]
fn text_cast_to_an_integer_type_truncates_a_fraction_as_flink() {
    // Flink reads the integral part and checks the fraction is digits (BinaryStringDataUtil).
    for (sql, want) in [
        ("CAST('3.5' AS INT)", "3"),
        ("CAST('-3.9' AS BIGINT)", "-3"),
        ("CAST(' 42 ' AS SMALLINT)", "42"),
        ("CAST('.5' AS TINYINT)", "0"),
        ("TRY_CAST('7.25' AS INT)", "7"),
        ("TRY_CAST('7.2x' AS INT)", "NULL"),
        ("TRY_CAST('1e3' AS INT)", "NULL"),
        ("TRY_CAST('99999999999.5' AS INT)", "NULL"),
        ("TRY_CAST('99999999999.5' AS BIGINT)", "99999999999"),
        ("CAST('3.5' AS DOUBLE)", "3.5"),
        ("CAST(CONCAT(CAST(n AS STRING), '.9') AS INT)", "2"),
    ] {
        assert_eq!(one(sql), want, "{sql}");
    }
    // Text Flink cannot read as an integer still fails a CAST: a dead letter at run time.
    let p = SqlScalar::new("CAST(CONCAT(s, '.5') AS INT)")
        .plan(&batch().schema())
        .unwrap();
    assert!(p.evaluate(&batch()).is_err());
}

#[test]
fn concat_of_bytes_is_bytes_and_casts_coercion_adds_are_not_flinks_text_casts() {
    assert_eq!(
        eval("CONCAT(X'61', X'6263')"),
        (DataType::Binary, vec!["616263".into(), "616263".into()])
    );
    // Text compared with a number is coerced by DataFusion, not read as Flink's CAST reads
    // text: '2.5' is no BIGINT, and the comparison fails rather than becoming n >= 2.
    let b = batch();
    let compared = SqlScalar::new("n >= '2.5'")
        .plan(&b.schema())
        .and_then(|p| p.evaluate(&b));
    assert!(compared.is_err(), "{compared:?}");
}

#[test]
fn unix_timestamp_reads_equal_texts_in_a_row_as_each_alone() {
    let text: arrow_array::ArrayRef = Arc::new(StringArray::from(vec![
        Some("2024-01-01 00:01:00"),
        Some("2024-01-01 00:01:00"),
        None,
        Some("2024-01-01 00:01:00"),
        Some("not a time"),
        Some("not a time"),
        Some("2024-01-01 00:02:00"),
        Some("2024-01-01 00:01:00"),
    ]));
    let got = crate::functions::unix_timestamp_text(&text);
    let want = Int64Array::from(vec![
        Some(1_704_067_260),
        Some(1_704_067_260),
        None,
        Some(1_704_067_260),
        Some(i64::MIN),
        Some(i64::MIN),
        Some(1_704_067_320),
        Some(1_704_067_260),
    ]);
    assert_eq!(got.as_any().downcast_ref::<Int64Array>().unwrap(), &want);
}
