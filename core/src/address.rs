//! Addresses as the API shows them: EIP-55 checksummed in every field.

use std::cell::RefCell;

use alloy::primitives::Address;

/// The EIP-55 form of a stored 20-byte address; `0x…` hex for anything that is not 20 bytes
/// (never produced by our own writers, but a response must not panic on a bad row).
pub fn checksum(bytes: &[u8]) -> String {
    match Address::try_from(bytes) {
        Ok(a) => with_checksum(&a, str::to_owned),
        Err(_) => hex0x(bytes),
    }
}

/// Slots of the per-thread checksum cache (a power of two): ~100 bytes each when used (the
/// address, and its 42-character text on the heap), ~200 KB per thread when full.
const SLOTS: usize = 2048;

/// Calls `f` with the EIP-55 text of `a`.
///
/// Each checksum is a keccak hash of the address's hex (~7,000 instructions with alloy's
/// `to_checksum`, callgrind), and a list page names a subscriber per row and the contract on
/// every row: a page of 20 subscriptions with distinct subscribers cost ~520,000 instructions
/// in the API, ~340,000 of them without the checksums. The texts are kept per thread in a
/// direct-mapped cache of [`SLOTS`] slots (an address's slot comes from its own bytes, which
/// are hash output for every real account; another address in the same slot replaces it), so
/// the contract, and the subscribers of pages read again, cost a comparison. `f` runs while
/// the cache is borrowed: it must not ask for another checksum (none does: they write the
/// text out or copy it).
pub fn with_checksum<R>(a: &Address, f: impl FnOnce(&str) -> R) -> R {
    thread_local! {
        static CACHE: RefCell<Vec<Option<(Address, String)>>> = const { RefCell::new(Vec::new()) };
    }
    CACHE.with_borrow_mut(|cache| {
        if cache.is_empty() {
            cache.resize(SLOTS, None);
        }
        let slot = &mut cache[slot_of(a)];
        match slot {
            Some((cached, text)) if cached == a => f(text),
            _ => {
                let (_, text) = slot.insert((*a, a.to_checksum(None)));
                f(text)
            }
        }
    })
}

/// The cache slot of `a`: Fibonacci hashing of 8 of its bytes (addresses chosen by hand,
/// such as `0x4444…` or ones that differ in a single byte, still spread).
fn slot_of(a: &Address) -> usize {
    let b = a.as_slice();
    let mut word = [0u8; 8];
    word[..4].copy_from_slice(&b[..4]);
    word[4..].copy_from_slice(&b[16..]);
    let mixed = u64::from_le_bytes(word).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (mixed >> (64 - SLOTS.trailing_zeros())) as usize
}

/// `0x…` lowercase hex (hashes).
pub fn hex0x(bytes: &[u8]) -> String {
    format!("0x{}", alloy::hex::encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_checksummed_and_hashes_lowercase() {
        let a = alloy::hex::decode("5fbdb2315678afecb367f032d93f642f64180aa3").unwrap();
        assert_eq!(checksum(&a), "0x5FbDB2315678afecb367f032d93F642f64180aa3");
        assert_eq!(checksum(&[0xAB]), "0xab");
        assert_eq!(hex0x(&[0xAB, 0x01]), "0xab01");
    }

    #[test]
    fn cached_checksums_are_the_checksums() {
        // Hash-like addresses, far more than the cache has slots (so slots are shared and
        // replaced), hand-made ones, and ones that differ in a single byte at either end.
        let mut addrs: Vec<Address> = (0..3 * SLOTS as u64)
            .map(|i| Address::from_slice(&alloy::primitives::keccak256(i.to_be_bytes())[12..]))
            .collect();
        addrs.extend((0..=255u8).map(Address::repeat_byte));
        for i in 0..=255u8 {
            let mut b = [0x11u8; 20];
            b[0] = i;
            addrs.push(Address::from(b));
            b[0] = 0x11;
            b[19] = i;
            addrs.push(Address::from(b));
        }
        // Three rounds, the last backwards: hits and replacements both answer right.
        for a in addrs.iter().chain(addrs.iter()).chain(addrs.iter().rev()) {
            with_checksum(a, |text| assert_eq!(text, a.to_checksum(None)));
            assert_eq!(checksum(a.as_slice()), a.to_checksum(None));
        }
    }

    #[test]
    fn slots_spread_hand_made_addresses() {
        let used: std::collections::HashSet<usize> = (0..=255u8)
            .map(|i| slot_of(&Address::repeat_byte(i)))
            .collect();
        assert!(used.len() > 200, "{} slots for 256 addresses", used.len());
    }
}
