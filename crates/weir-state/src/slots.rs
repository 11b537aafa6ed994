//! Per-key state in numbered slots.

/// Per-key state held in slots: a key maps to a slot index that stays put while the key has
/// state, so other structures (expiry queues) can refer to it by number. Each key's bytes are
/// stored once, in its slot (inline up to 24 bytes); the index holds slot numbers.
pub struct KeySlots<T> {
    index: hashbrown::HashTable<u32>,
    slots: Vec<(InlineKey, u64, T)>,
    free: Vec<u32>,
    key_bytes: usize,
}

type InlineKey = smallvec::SmallVec<[u8; 24]>;

impl<T> std::fmt::Debug for KeySlots<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeySlots")
            .field("keys", &self.index.len())
            .finish()
    }
}

impl<T: Default> KeySlots<T> {
    pub fn new() -> Self {
        KeySlots {
            index: hashbrown::HashTable::new(),
            slots: Vec::new(),
            free: Vec::new(),
            key_bytes: 0,
        }
    }

    /// The slot of `key` (hash `hash`), made with `T::default()` if the key has none.
    pub fn slot_for(&mut self, hash: u64, key: &[u8]) -> usize {
        let slots = &mut self.slots;
        let entry = self.index.entry(
            hash,
            |&s| &*slots[s as usize].0 == key,
            |&s| slots[s as usize].1,
        );
        match entry {
            hashbrown::hash_table::Entry::Occupied(o) => *o.get() as usize,
            hashbrown::hash_table::Entry::Vacant(v) => {
                let s = match self.free.pop() {
                    Some(s) => {
                        slots[s as usize] = (InlineKey::from_slice(key), hash, T::default());
                        s
                    }
                    None => {
                        slots.push((InlineKey::from_slice(key), hash, T::default()));
                        (slots.len() - 1) as u32
                    }
                };
                self.key_bytes += key.len();
                v.insert(s);
                s as usize
            }
        }
    }

    /// The slot of `key`, if it has one.
    pub fn find(&self, hash: u64, key: &[u8]) -> Option<usize> {
        self.index
            .find(hash, |&s| &*self.slots[s as usize].0 == key)
            .map(|&s| s as usize)
    }

    pub fn get(&self, slot: usize) -> &T {
        &self.slots[slot].2
    }

    /// The key bytes of `slot`.
    pub fn key(&self, slot: usize) -> &[u8] {
        &self.slots[slot].0
    }

    /// Slots that hold a key.
    pub fn slots(&self) -> impl Iterator<Item = usize> + '_ {
        self.index.iter().map(|&s| s as usize)
    }

    pub fn get_mut(&mut self, slot: usize) -> &mut T {
        &mut self.slots[slot].2
    }

    /// Forgets the key of `slot`; the slot may be handed to another key. Releasing a slot that
    /// holds no key does nothing.
    pub fn release(&mut self, slot: usize) {
        let hash = self.slots[slot].1;
        match self.index.find_entry(hash, |&s| s as usize == slot) {
            Ok(e) => {
                e.remove();
            }
            Err(_) => return,
        }
        let (key, _, value) = &mut self.slots[slot];
        self.key_bytes -= key.len();
        *key = InlineKey::new();
        *value = T::default();
        self.free.push(slot as u32);
    }

    /// Keys that have a slot.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Bytes of keys and the index (not of the per-key values).
    pub fn index_bytes(&self) -> u64 {
        (self.key_bytes + self.slots.len() * (std::mem::size_of::<(InlineKey, u64, T)>() + 5))
            as u64
    }
}

impl<T: Default> Default for KeySlots<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::keys::hash_key;

    #[test]
    fn releasing_a_slot_twice_does_not_hand_it_to_two_keys() {
        let mut slots: KeySlots<u32> = KeySlots::new();
        let a = slots.slot_for(hash_key(b"a"), b"a");
        slots.release(a);
        slots.release(a);
        let b = slots.slot_for(hash_key(b"b"), b"b");
        let c = slots.slot_for(hash_key(b"c"), b"c");
        assert_ne!(b, c);
        assert_eq!(slots.len(), 2);
    }
}
