//! Rows as CSV text, byte for byte as arrow-csv's writer writes them (the csv crate's quoting
//! where needed, `""` doubled inside quotes, NULL as an empty field, an empty record as `""`),
//! without its per-value costs: arrow-csv formats every value into a `String` through a
//! dynamic formatter and copies it twice, and Arrow's DECIMAL formatter allocates twice per
//! value (a quarter of the temporal join's CPU). Integers, DECIMALs, booleans and strings are
//! written straight into the output; other types go through Arrow's formatter with arrow-csv's
//! options. The file, Kafka and stdout sinks write what [`CsvEncoder`] makes of
//! [`crate::values::flink_text`]'s batches.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Decimal128Type, DecimalType, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type,
    UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrowPrimitiveType, PrimitiveArray, RecordBatch};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::{ArrowError, DataType};

/// Writes batches as CSV records, with a header line before the first when asked.
pub(crate) struct CsvEncoder {
    delimiter: u8,
    header: bool,
    /// Bytes that make a field quoted: the delimiter, the quote, `\r` and `\n`.
    special: [bool; 256],
    /// No integer or DECIMAL text holds a special byte (the delimiter is not a digit, `-`
    /// or `.`), so numbers are written without looking for one.
    numbers_plain: bool,
}

impl CsvEncoder {
    pub(crate) fn new(delimiter: u8, header: bool) -> Self {
        let mut special = [false; 256];
        for b in [delimiter, b'"', b'\r', b'\n'] {
            special[b as usize] = true;
        }
        let numbers_plain = !b"0123456789-.".iter().any(|&b| special[b as usize]);
        CsvEncoder {
            delimiter,
            header,
            special,
            numbers_plain,
        }
    }

    /// Appends the records of `batch` (and the header, before the first batch) to `out`.
    ///
    /// # Errors
    /// A nested column (CSV has none), or a value Arrow cannot format.
    pub(crate) fn encode(
        &mut self,
        batch: &RecordBatch,
        out: &mut Vec<u8>,
    ) -> Result<(), ArrowError> {
        if std::mem::take(&mut self.header) {
            let schema = batch.schema();
            let names: Vec<&[u8]> = schema
                .fields()
                .iter()
                .map(|f| f.name().as_bytes())
                .collect();
            self.record(out, names.len(), |i, out| {
                self.push_text(out, names[i]);
                Ok(())
            })?;
        }
        let options = FormatOptions::default().with_null("");
        let columns = batch
            .columns()
            .iter()
            .map(|c| Column::of(c.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()?;
        out.reserve(batch.num_rows() * (columns.len() * 8 + 1));
        let mut text = String::new();
        for row in 0..batch.num_rows() {
            self.record(out, columns.len(), |i, out| {
                columns[i].write(row, self, out, &mut text).map_err(|e| {
                    ArrowError::CsvError(format!(
                        "Error processing row {}, col {}: {e}",
                        row + 1,
                        i + 1
                    ))
                })
            })?;
        }
        Ok(())
    }

    /// One record of `fields` fields, each written by `field`; a record of no bytes at all
    /// (one empty field) is written `""`, as the csv crate writes it.
    fn record(
        &self,
        out: &mut Vec<u8>,
        fields: usize,
        mut field: impl FnMut(usize, &mut Vec<u8>) -> Result<(), ArrowError>,
    ) -> Result<(), ArrowError> {
        let start = out.len();
        for i in 0..fields {
            if i > 0 {
                out.push(self.delimiter);
            }
            field(i, out)?;
        }
        if out.len() == start {
            out.extend_from_slice(b"\"\"");
        }
        out.push(b'\n');
        Ok(())
    }

    /// A text field, quoted when it holds a special byte, its quotes doubled.
    fn push_text(&self, out: &mut Vec<u8>, text: &[u8]) {
        if !text.iter().any(|&b| self.special[b as usize]) {
            out.extend_from_slice(text);
            return;
        }
        out.push(b'"');
        for &b in text {
            if b == b'"' {
                out.push(b'"');
            }
            out.push(b);
        }
        out.push(b'"');
    }

    /// Number text: written as is unless the delimiter could occur in it.
    fn push_number(&self, out: &mut Vec<u8>, text: &[u8]) {
        if self.numbers_plain {
            out.extend_from_slice(text);
        } else {
            self.push_text(out, text);
        }
    }
}

/// A column with its writer.
enum Column<'a> {
    I8(&'a PrimitiveArray<Int8Type>),
    I16(&'a PrimitiveArray<Int16Type>),
    I32(&'a PrimitiveArray<Int32Type>),
    I64(&'a PrimitiveArray<Int64Type>),
    U8(&'a PrimitiveArray<UInt8Type>),
    U16(&'a PrimitiveArray<UInt16Type>),
    U32(&'a PrimitiveArray<UInt32Type>),
    U64(&'a PrimitiveArray<UInt64Type>),
    Decimal(&'a PrimitiveArray<Decimal128Type>, u8, u8),
    Boolean(&'a arrow_array::BooleanArray),
    Utf8(&'a arrow_array::StringArray),
    LargeUtf8(&'a arrow_array::LargeStringArray),
    Utf8View(&'a arrow_array::StringViewArray),
    /// Everything else, through Arrow's formatter as arrow-csv calls it.
    Other(&'a dyn Array, ArrayFormatter<'a>),
}

impl<'a> Column<'a> {
    fn of(a: &'a dyn Array, options: &FormatOptions<'a>) -> Result<Self, ArrowError> {
        Ok(match a.data_type() {
            DataType::Int8 => Column::I8(a.as_primitive()),
            DataType::Int16 => Column::I16(a.as_primitive()),
            DataType::Int32 => Column::I32(a.as_primitive()),
            DataType::Int64 => Column::I64(a.as_primitive()),
            DataType::UInt8 => Column::U8(a.as_primitive()),
            DataType::UInt16 => Column::U16(a.as_primitive()),
            DataType::UInt32 => Column::U32(a.as_primitive()),
            DataType::UInt64 => Column::U64(a.as_primitive()),
            DataType::Decimal128(p, s) if *s >= 0 => {
                Column::Decimal(a.as_primitive(), *p, *s as u8)
            }
            DataType::Boolean => Column::Boolean(a.as_boolean()),
            DataType::Utf8 => Column::Utf8(a.as_string()),
            DataType::LargeUtf8 => Column::LargeUtf8(a.as_string()),
            DataType::Utf8View => Column::Utf8View(a.as_string_view()),
            t if t.is_nested() => {
                return Err(ArrowError::CsvError(format!(
                    "Nested type {t} is not supported in CSV"
                )))
            }
            _ => Column::Other(a, ArrayFormatter::try_new(a, options)?),
        })
    }

    fn write(
        &self,
        row: usize,
        enc: &CsvEncoder,
        out: &mut Vec<u8>,
        text: &mut String,
    ) -> Result<(), ArrowError> {
        fn int<T: ArrowPrimitiveType>(
            a: &PrimitiveArray<T>,
            row: usize,
            enc: &CsvEncoder,
            out: &mut Vec<u8>,
        ) where
            T::Native: itoa::Integer,
        {
            if a.is_valid(row) {
                enc.push_number(out, itoa::Buffer::new().format(a.value(row)).as_bytes());
            }
        }
        match self {
            Column::I8(a) => int(*a, row, enc, out),
            Column::I16(a) => int(*a, row, enc, out),
            Column::I32(a) => int(*a, row, enc, out),
            Column::I64(a) => int(*a, row, enc, out),
            Column::U8(a) => int(*a, row, enc, out),
            Column::U16(a) => int(*a, row, enc, out),
            Column::U32(a) => int(*a, row, enc, out),
            Column::U64(a) => int(*a, row, enc, out),
            Column::Decimal(a, p, s) => {
                if a.is_valid(row) {
                    let start = out.len();
                    push_decimal(out, a.value(row), *p, *s);
                    if !enc.numbers_plain {
                        let number = out.split_off(start);
                        enc.push_text(out, &number);
                    }
                }
            }
            Column::Boolean(a) => {
                if a.is_valid(row) {
                    // Quoted when the delimiter is one of its letters, as the csv crate does.
                    enc.push_text(out, if a.value(row) { b"true" } else { b"false" });
                }
            }
            Column::Utf8(a) => {
                if a.is_valid(row) {
                    enc.push_text(out, a.value(row).as_bytes());
                }
            }
            Column::LargeUtf8(a) => {
                if a.is_valid(row) {
                    enc.push_text(out, a.value(row).as_bytes());
                }
            }
            Column::Utf8View(a) => {
                if a.is_valid(row) {
                    enc.push_text(out, a.value(row).as_bytes());
                }
            }
            Column::Other(a, f) => {
                if a.is_valid(row) {
                    text.clear();
                    f.value(row).write(text)?;
                    enc.push_text(out, text.as_bytes());
                }
            }
        }
        Ok(())
    }
}

/// A DECIMAL(`precision`, `scale`) value as Arrow's `format_decimal` writes it: the digits
/// with a point `scale` from the right, `0.` and zeros before digits fewer than the scale. A
/// value with more digits than the precision (Arrow writes it cut) goes through Arrow's own
/// formatter.
fn push_decimal(out: &mut Vec<u8>, v: i128, precision: u8, scale: u8) {
    let mut text = itoa::Buffer::new();
    let digits = text.format(v.unsigned_abs()).as_bytes();
    if digits.len() > usize::from(precision) {
        out.extend_from_slice(Decimal128Type::format_decimal(v, precision, scale as i8).as_bytes());
        return;
    }
    let scale = usize::from(scale);
    if v < 0 {
        out.push(b'-');
    }
    if scale == 0 {
        out.extend_from_slice(digits);
    } else if digits.len() > scale {
        let (whole, fraction) = digits.split_at(digits.len() - scale);
        out.extend_from_slice(whole);
        out.push(b'.');
        out.extend_from_slice(fraction);
    } else {
        out.extend_from_slice(b"0.");
        out.resize(out.len() + scale - digits.len(), b'0');
        out.extend_from_slice(digits);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{
        ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float64Array, Int16Array, Int64Array,
        LargeStringArray, StringArray, StringViewArray, UInt64Array,
    };
    use proptest::prelude::*;

    use super::*;

    /// What arrow-csv's writer writes for `batches`.
    fn arrow_csv(batches: &[RecordBatch], delimiter: u8, header: bool) -> Vec<u8> {
        let mut buf = Vec::new();
        let mut w = arrow_csv::WriterBuilder::new()
            .with_header(header)
            .with_delimiter(delimiter)
            .build(&mut buf);
        for b in batches {
            w.write(b).unwrap();
        }
        drop(w);
        buf
    }

    fn ours(batches: &[RecordBatch], delimiter: u8, header: bool) -> Vec<u8> {
        let mut enc = CsvEncoder::new(delimiter, header);
        let mut out = Vec::new();
        for b in batches {
            enc.encode(b, &mut out).unwrap();
        }
        out
    }

    fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
        RecordBatch::try_from_iter(columns).unwrap()
    }

    #[test]
    fn every_type_quote_and_null_is_written_as_arrow_csv_writes_it() {
        let decimal = |p, s, v: Vec<Option<i128>>| -> ArrayRef {
            Arc::new(
                Decimal128Array::from(v)
                    .with_precision_and_scale(p, s)
                    .unwrap(),
            )
        };
        let b = batch(vec![
            (
                "a,b",
                Arc::new(Int64Array::from(vec![
                    Some(i64::MIN),
                    None,
                    Some(0),
                    Some(42),
                ])),
            ),
            (
                "i16",
                Arc::new(Int16Array::from(vec![
                    Some(-7),
                    Some(i16::MAX),
                    None,
                    Some(0),
                ])),
            ),
            (
                "u64",
                Arc::new(UInt64Array::from(vec![
                    Some(u64::MAX),
                    Some(1),
                    None,
                    Some(0),
                ])),
            ),
            (
                "s",
                Arc::new(StringArray::from(vec![
                    Some("plain"),
                    Some("with,comma"),
                    Some("say \"hi\"\nbye\r"),
                    None,
                ])),
            ),
            (
                "empty",
                Arc::new(StringArray::from(vec![
                    Some(""),
                    None,
                    Some(" x "),
                    Some("é;ü"),
                ])),
            ),
            (
                "large",
                Arc::new(LargeStringArray::from(vec![
                    Some("1;2"),
                    None,
                    Some("\""),
                    Some("x"),
                ])),
            ),
            (
                "view",
                Arc::new(StringViewArray::from(vec![
                    Some("a longer string than twelve bytes, with a comma"),
                    None,
                    Some("short"),
                    Some(""),
                ])),
            ),
            (
                "d",
                decimal(12, 2, vec![Some(150), Some(-5), None, Some(0)]),
            ),
            (
                "d0",
                decimal(
                    38,
                    0,
                    vec![Some(i128::MAX), Some(i128::MIN), Some(-1), None],
                ),
            ),
            (
                "cut",
                decimal(3, 1, vec![Some(123_456), Some(-99_999), Some(12), None]),
            ),
            (
                "b",
                Arc::new(BooleanArray::from(vec![
                    Some(true),
                    Some(false),
                    None,
                    Some(true),
                ])),
            ),
            (
                "f",
                Arc::new(Float64Array::from(vec![
                    Some(1.5),
                    Some(-0.0),
                    None,
                    Some(1e300),
                ])),
            ),
            (
                "day",
                Arc::new(Date32Array::from(vec![
                    Some(0),
                    Some(19_753),
                    None,
                    Some(-1),
                ])),
            ),
        ]);
        for delimiter in [b',', b';', b'\t', b'.', b'1', b'-', b'e', b'a'] {
            for header in [true, false] {
                let two = [b.clone(), b.slice(1, 2)];
                assert_eq!(
                    String::from_utf8(ours(&two, delimiter, header)).unwrap(),
                    String::from_utf8(arrow_csv(&two, delimiter, header)).unwrap(),
                    "delimiter {:?}, header {header}",
                    delimiter as char
                );
            }
        }
    }

    #[test]
    fn a_record_of_one_empty_field_is_quoted_as_arrow_csv_writes_it() {
        let b = batch(vec![(
            "only",
            Arc::new(StringArray::from(vec![
                Some(""),
                None,
                Some("x"),
                Some("\""),
            ])) as ArrayRef,
        )]);
        assert_eq!(
            ours(std::slice::from_ref(&b), b',', true),
            arrow_csv(&[b], b',', true)
        );
    }

    #[test]
    fn nested_columns_are_refused_as_arrow_csv_refuses_them() {
        let list = arrow_array::ListArray::from_iter_primitive::<Int32Type, _, _>(vec![Some(
            vec![Some(1)],
        )]);
        let b = batch(vec![("l", Arc::new(list) as ArrayRef)]);
        let err = CsvEncoder::new(b',', false)
            .encode(&b, &mut Vec::new())
            .unwrap_err();
        assert!(err.to_string().contains("Nested type"), "{err}");
    }

    proptest! {
        #[test]
        fn any_rows_are_written_as_arrow_csv_writes_them(
            rows in proptest::collection::vec(
                (
                    proptest::option::of(any::<i64>()),
                    proptest::option::of("[a-c,;\"\\r\\n é]{0,6}"),
                    proptest::option::of(any::<i128>()),
                    proptest::option::of(-100_000i128..100_000),
                    proptest::option::of(any::<bool>()),
                ),
                0..30,
            ),
            precision in 1u8..=38,
            scale in 0u8..=38,
            delimiter in proptest::sample::select(vec![b',', b';', b'|', b'7', b'.', b'e', b'u']),
        ) {
            let scale = scale.min(precision);
            let decimal = |v: Vec<Option<i128>>| -> ArrayRef {
                Arc::new(
                    Decimal128Array::from(v)
                        .with_precision_and_scale(precision, scale as i8)
                        .unwrap(),
                )
            };
            let b = batch(vec![
                ("n", Arc::new(rows.iter().map(|r| r.0).collect::<Int64Array>()) as ArrayRef),
                (
                    "s",
                    Arc::new(rows.iter().map(|r| r.1.clone()).collect::<StringArray>()),
                ),
                ("wide", decimal(rows.iter().map(|r| r.2).collect())),
                ("small", decimal(rows.iter().map(|r| r.3).collect())),
                ("b", Arc::new(rows.iter().map(|r| r.4).collect::<BooleanArray>())),
            ]);
            prop_assert_eq!(ours(std::slice::from_ref(&b), delimiter, true), arrow_csv(&[b], delimiter, true));
        }

        #[test]
        fn any_decimal_is_written_as_arrow_writes_it(
            v in any::<i128>(),
            small in -1_000_000i128..1_000_000,
            precision in 1u8..=38,
            scale in 0u8..=38,
        ) {
            let scale = scale.min(precision);
            for v in [v, small] {
                let mut out = Vec::new();
                push_decimal(&mut out, v, precision, scale);
                prop_assert_eq!(
                    String::from_utf8(out).unwrap(),
                    Decimal128Type::format_decimal(v, precision, scale as i8)
                );
            }
        }
    }
}
