//! Rows buffered by reference: an operator that keeps input rows (a join's two sides, a
//! table's current rows) stores the batches they came in and points at rows of them, instead
//! of copying rows one by one. A batch is freed with its last live row.

use arrow_array::{new_null_array, Array, ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;

use crate::Result;

/// A buffered row: a row of a stored batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowRef {
    pub batch: u32,
    pub row: u32,
}

/// Batches that buffered rows point into; a batch is freed when its last live row goes. A
/// clone shares the batches (a snapshot's view of them).
#[derive(Debug, Clone)]
pub struct BatchStore {
    /// Per slot: the batch, its live rows, and its number among all batches ever stored.
    batches: Vec<Option<(RecordBatch, u32)>>,
    seqs: Vec<u64>,
    next_seq: u64,
    free: Vec<u32>,
    bytes: usize,
    schema: SchemaRef,
}

impl BatchStore {
    pub fn new(schema: SchemaRef) -> Self {
        BatchStore {
            batches: Vec::new(),
            seqs: Vec::new(),
            next_seq: 0,
            free: Vec::new(),
            bytes: 0,
            schema,
        }
    }

    /// Stores a batch with no live rows yet; rows become live with [`BatchStore::retain`].
    pub fn insert(&mut self, batch: RecordBatch) -> u32 {
        self.bytes += batch.get_array_memory_size();
        let seq = self.next_seq;
        self.next_seq += 1;
        match self.free.pop() {
            Some(id) => {
                self.batches[id as usize] = Some((batch, 0));
                self.seqs[id as usize] = seq;
                id
            }
            None => {
                self.batches.push(Some((batch, 0)));
                self.seqs.push(seq);
                (self.batches.len() - 1) as u32
            }
        }
    }

    /// One more buffered row points into `batch`.
    pub fn retain(&mut self, batch: u32) {
        if let Some((_, live)) = &mut self.batches[batch as usize] {
            *live += 1;
        }
    }

    /// A buffered row of `batch` went; frees the batch with its last row.
    pub fn release(&mut self, batch: u32) {
        let slot = &mut self.batches[batch as usize];
        if let Some((b, live)) = slot {
            *live -= 1;
            if *live == 0 {
                self.bytes -= b.get_array_memory_size();
                *slot = None;
                self.free.push(batch);
            }
        }
    }

    /// Frees `batch` if no buffered row points into it (call after inserting rows of it).
    pub fn release_if_unused(&mut self, batch: u32) {
        let slot = &mut self.batches[batch as usize];
        if let Some((b, 0)) = slot {
            self.bytes -= b.get_array_memory_size();
            *slot = None;
            self.free.push(batch);
        }
    }

    /// Memory held by stored batches.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The number of stored batch `id` among all batches this store has held: unlike `id`,
    /// never handed to another batch.
    pub fn seq(&self, id: u32) -> u64 {
        self.seqs[id as usize]
    }

    /// A stored batch (it must be live).
    pub fn batch(&self, id: u32) -> &RecordBatch {
        &self.batches[id as usize].as_ref().expect("a live batch").0
    }

    /// The columns of `rows` (`None`: a row of NULLs), in order.
    pub fn gather(&self, rows: &[Option<RowRef>]) -> Result<Vec<ArrayRef>> {
        // Number the distinct batches used; the NULL row is one more one-row source. Each
        // batch's number is looked up by its id, a place among the store's batches, rather
        // than in a map hashing every row's id.
        let mut number: Vec<usize> = vec![usize::MAX; self.batches.len()];
        let mut order: Vec<u32> = Vec::new();
        let mut idx: Vec<(usize, usize)> = Vec::with_capacity(rows.len());
        let mut needs_null = false;
        for r in rows {
            match r {
                Some(r) => {
                    let n = &mut number[r.batch as usize];
                    if *n == usize::MAX {
                        *n = order.len();
                        order.push(r.batch);
                    }
                    idx.push((*n, r.row as usize));
                }
                None => {
                    needs_null = true;
                    idx.push((usize::MAX, 0));
                }
            }
        }
        let null_source = order.len();
        if needs_null {
            for i in &mut idx {
                if i.0 == usize::MAX {
                    i.0 = null_source;
                }
            }
        }
        let mut out = Vec::with_capacity(self.schema.fields().len());
        for (c, field) in self.schema.fields().iter().enumerate() {
            let mut sources: Vec<ArrayRef> = order
                .iter()
                .map(|&b| self.batch(b).column(c).clone())
                .collect();
            if needs_null {
                sources.push(new_null_array(field.data_type(), 1));
            }
            let refs: Vec<&dyn Array> = sources.iter().map(|a| a.as_ref()).collect();
            out.push(if refs.is_empty() {
                new_null_array(field.data_type(), 0)
            } else {
                arrow_select::interleave::interleave(&refs, &idx)
                    .map_err(|e| crate::Error::Internal(format!("gathering buffered rows: {e}")))?
            });
        }
        Ok(out)
    }
}
