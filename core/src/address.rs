//! Addresses as the API shows them: EIP-55 checksummed in every field.

use alloy::primitives::Address;

/// The EIP-55 form of a stored 20-byte address; `0x…` hex for anything that is not 20 bytes
/// (never produced by our own writers, but a response must not panic on a bad row).
pub fn checksum(bytes: &[u8]) -> String {
    if bytes.len() == 20 {
        Address::from_slice(bytes).to_checksum(None)
    } else {
        hex0x(bytes)
    }
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
}
