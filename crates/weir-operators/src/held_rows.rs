//! What the operators that hold rows until the watermark share: telling late rows from
//! on-time ones, and turning held rows (Arrow's row format) back into columns for a checkpoint.

use arrow_array::{ArrayRef, BooleanArray, UInt32Array};
use arrow_row::RowConverter;
use weir_runtime::{Result, StreamBatch};

/// `batch` split into its on-time rows, with their times, and its late rows (if any): a row
/// is late when its time is at or below the later of its split's watermark just before it and
/// `watermark` (the operator's), less `slack`.
pub(crate) fn split_late(
    batch: StreamBatch,
    times: &[i64],
    watermark: i64,
    slack: i64,
) -> Result<(StreamBatch, Vec<i64>, Option<StreamBatch>)> {
    let late: Vec<bool> = (times.iter().enumerate())
        .map(|(i, &t)| {
            let row_wm = batch.row_watermarks.as_ref().map_or(i64::MIN, |w| w[i]);
            t <= row_wm.max(watermark).saturating_sub(slack)
        })
        .collect();
    if !late.contains(&true) {
        return Ok((batch, times.to_vec(), None));
    }
    let on_time_times = (times.iter().zip(&late))
        .filter(|(_, &l)| !l)
        .map(|(&t, _)| t)
        .collect();
    let late_rows = batch.filter(&late.iter().map(|&l| Some(l)).collect::<BooleanArray>())?;
    let on_time = batch.filter(&late.iter().map(|&l| Some(!l)).collect::<BooleanArray>())?;
    Ok((on_time, on_time_times, Some(late_rows)))
}

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
