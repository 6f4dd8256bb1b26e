//! Bulk transactions on a dev chain: thousands of `eth_sendTransaction`s (anvil signs for its
//! unlocked accounts) in JSON-RPC batches, mined out in big blocks — how the benchmarks build
//! large chains in seconds.

use alloy::primitives::{Address, B256};
use alloy::providers::Provider;
use alloy::rpc::client::BatchRequest;
use serde_json::json;

use crate::DevChain;

/// Raw JSON-RPC against a dev chain, for building big chains fast.
pub struct Bulk<'a> {
    chain: &'a DevChain,
}

impl<'a> Bulk<'a> {
    pub fn new(chain: &'a DevChain) -> Self {
        Bulk { chain }
    }

    /// One JSON-RPC call; panics on an error.
    pub async fn raw(&self, method: &'static str, params: serde_json::Value) -> serde_json::Value {
        self.chain
            .provider
            .raw_request(method.into(), params)
            .await
            .unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    /// Sends `txs` (from, to, calldata, nonce) to the pool with `eth_sendTransaction`
    /// (anvil signs for its unlocked accounts), in JSON-RPC batches.
    pub async fn send_all(&self, txs: &[(Address, Address, Vec<u8>, u64)], gas: u64) {
        for chunk in txs.chunks(500) {
            let client = self.chain.provider.client();
            let mut batch = BatchRequest::new(client);
            let mut waiters = Vec::new();
            for (from, to, data, nonce) in chunk {
                let tx = json!({
                    "from": from, "to": to, "input": alloy::hex::encode_prefixed(data),
                    "gas": format!("{gas:#x}"), "gasPrice": "0x3b9aca00", "nonce": format!("{nonce:#x}"),
                });
                waiters.push(
                    batch
                        .add_call::<_, B256>("eth_sendTransaction", &(tx,))
                        .unwrap(),
                );
            }
            batch.send().await.unwrap();
            for w in waiters {
                w.await.expect("eth_sendTransaction");
            }
        }
    }

    /// Sends `txs` a chunk at a time and mines each chunk out before the next (anvil's pool
    /// slows down badly when it holds tens of thousands of transactions).
    pub async fn send_and_mine(
        &self,
        txs: &[(Address, Address, Vec<u8>, u64)],
        gas: u64,
        per_block: Option<u64>,
    ) {
        let chunk = per_block.map_or(5_000, |k| k as usize * 100);
        for part in txs.chunks(chunk) {
            self.send_all(part, gas).await;
            self.mine_out(per_block).await;
        }
    }

    /// Mines until the pool is empty: `per_block` transactions fit a block (by the block gas
    /// limit), so that many blocks are mined per call; `None`: one block per call.
    pub async fn mine_out(&self, per_block: Option<u64>) {
        loop {
            let status = self.raw("txpool_status", json!([])).await;
            let pending = u64::from_str_radix(
                status["pending"]
                    .as_str()
                    .unwrap_or("0x0")
                    .trim_start_matches("0x"),
                16,
            )
            .unwrap_or(0);
            if pending == 0 {
                return;
            }
            let n = per_block.map_or(1, |k| pending.div_ceil(k));
            self.raw("anvil_mine", json!([format!("{n:#x}")])).await;
        }
    }
}
