//! Rows an operator holds in Arrow's row format, back to columns for a checkpoint.

use arrow_array::{ArrayRef, UInt32Array};
use arrow_row::RowConverter;
use weir_runtime::Result;

/// The columns of `rows` (encoded by `converter`), one row per entry: NULL in every column
/// where an entry has no row (state rows of another kind).
pub(crate) fn columns_with_gaps(
    converter: &RowConverter,
    rows: &[Option<&[u8]>],
) -> Result<Vec<ArrayRef>> {
    let parser = converter.parser();
    let present: Vec<_> = rows.iter().flatten().map(|r| parser.parse(r)).collect();
    let mut next = 0u32;
    let at: UInt32Array = (rows.iter())
        .map(|r| {
            r.map(|_| {
                next += 1;
                next - 1
            })
        })
        .collect();
    (converter.convert_rows(present)?.iter())
        .map(|c| Ok(arrow_select::take::take(c, &at, None)?))
        .collect()
}
