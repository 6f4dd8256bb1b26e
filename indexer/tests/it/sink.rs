//! The sink writes a block's events once, whatever its caller does: a batch is tied to the
//! cursor it extends (number and hash), and an event is stored at most once — its unique keys,
//! (chain id, block hash, log index) and its public id (derived from chain id, transaction
//! hash and log index), refuse a second copy, and the batch that carried it fails whole,
//! cursor included.

use std::sync::Arc;

use crate::common::fake::{FakeChain, Faults};
use crate::common::*;
use alloy::primitives::{Address, B256};
use chainsub_indexer::Error;
use chainsub_indexer::block::{Block, Cursor};
use chainsub_indexer::sink::Sink;
use chainsub_indexer::source::{FetchConfig, Fetcher};
use chainsub_indexer::writer;
use chainsub_tests::TestDb;
use tokio_postgres::Client;

const CHAIN: u64 = 31_337;
const CONTRACT: Address = Address::repeat_byte(0xcc);

/// Blocks 1..=tip of a seeded fake chain, read the way the indexer reads them.
async fn chain_blocks(blocks: u64) -> (Cursor, Vec<Block>) {
    let chain = Arc::new(FakeChain::new(5, CONTRACT, blocks + 1, Faults::none()));
    chain.set_faulty(false);
    let mut fetcher = Fetcher::new(chain.clone(), CONTRACT, FetchConfig::default());
    let (mut got, mut next) = (Vec::new(), 1);
    while next <= blocks {
        let b = fetcher.fetch(next, blocks).await;
        next = b.last().unwrap().number + 1;
        got.extend(b);
    }
    let genesis = Cursor {
        number: 0,
        hash: got[0].parent_hash,
    };
    (genesis, got)
}

/// A sink on a fresh index whose cursor starts at `genesis`, and a second connection to read
/// the index with.
async fn sink(db: &TestDb, genesis: Cursor) -> (Sink, Client) {
    let client = writer::connect(&db.url).await.unwrap();
    let epoch = writer::claim_cursor(
        &client,
        chainsub_core::ChainId::new(CHAIN).unwrap(),
        CONTRACT,
        genesis,
    )
    .await
    .unwrap();
    (
        Sink::new(
            client,
            chainsub_core::ChainId::new(CHAIN).unwrap(),
            CONTRACT,
            epoch,
            2,
        ),
        db.connect().await,
    )
}

fn events(blocks: &[Block]) -> usize {
    blocks.iter().map(|b| b.logs.len()).sum()
}

#[tokio::test]
async fn a_batch_applied_again_is_refused_and_writes_nothing() {
    let (genesis, mut blocks) = chain_blocks(41).await;
    let next = blocks.pop().unwrap();
    let (first, second) = blocks.split_at(20);
    assert!(
        events(first) > 0 && events(second) > 0,
        "the seed makes events"
    );
    let tip = blocks.last().unwrap().number;
    let db = TestDb::create().await;
    let (mut sink, reader) = sink(&db, genesis).await;
    sink.apply(first, tip, 0).await.unwrap();
    sink.apply(second, tip, 0).await.unwrap();
    let before = dump(&reader).await;
    assert!(before.iter().any(|r| r.starts_with("outbox ")));

    // Either batch again (a retry after a lost commit acknowledgement, a replayed range).
    for batch in [first, second] {
        let err = sink.apply(batch, tip, 0).await.unwrap_err();
        assert!(matches!(err, Error::CursorMismatch { .. }), "{err}");
        assert_same_index(&dump(&reader).await, &before);
    }
    // The next block with another parent (a block of a branch the sink never saw): the number
    // follows the cursor, the hash does not.
    let mut forged = next.clone();
    forged.parent_hash = B256::repeat_byte(0xee);
    let err = sink.apply(&[forged], tip + 1, 0).await.unwrap_err();
    assert!(matches!(err, Error::CursorMismatch { .. }), "{err}");
    assert_same_index(&dump(&reader).await, &before);
    // The sink still extends the cursor it refused to rewrite.
    sink.apply(&[next], tip + 1, 0).await.unwrap();
    assert_eq!(cursor(&reader).await.map(|(n, _)| n as u64), Some(tip + 1));
}

#[tokio::test]
async fn a_batch_of_many_blocks_fails_whole_on_one_event_already_stored() {
    let (genesis, blocks) = chain_blocks(40).await;
    let tip = blocks.last().unwrap().number;
    let db = TestDb::create().await;
    let (mut sink, reader) = sink(&db, genesis).await;
    sink.apply(&blocks[..20], tip, 0).await.unwrap();
    // A row holding the key of a log late in the next batch (chain id, block hash, log index),
    // under another public id: only that key can refuse the batch's copy of the log.
    let (block, log) = blocks[30..]
        .iter()
        .find_map(|b| b.logs.last().map(|l| (b, l)))
        .expect("the seed makes events late in the chain");
    reader
        .execute(
            "INSERT INTO chain_events (public_id, chain_id, contract, block_number, block_hash,
                 block_time, transaction_hash, transaction_index, log_index, name, topics, data)
             VALUES ('evt_by_hand', $1, $2, $3, $4, now(), $5, 0, $6, 'ByHand', '{}', '')",
            &[
                &(CHAIN as i64),
                &CONTRACT.as_slice(),
                &(block.number as i64),
                &block.hash.as_slice(),
                &B256::repeat_byte(0xab).as_slice(),
                &(log.log_index as i32),
            ],
        )
        .await
        .unwrap();
    let before = dump(&reader).await;
    let err = sink.apply(&blocks[20..], tip, 0).await.unwrap_err();
    assert!(
        matches!(&err, Error::Inconsistent(m) if m.contains("an event of the batch is already stored")),
        "{err}"
    );
    // None of the batch's twenty blocks stayed, the cursor included.
    assert_same_index(&dump(&reader).await, &before);
    assert_eq!(
        cursor(&reader).await.map(|(n, _)| n as u64),
        Some(blocks[19].number)
    );
}

#[tokio::test]
async fn an_event_already_stored_fails_the_whole_batch_cursor_included() {
    let (genesis, blocks) = chain_blocks(40).await;
    let tip = blocks.last().unwrap().number;
    let db = TestDb::create().await;
    let (mut sink, reader) = sink(&db, genesis).await;
    sink.apply(&blocks, tip, 0).await.unwrap();
    let (mut unique, mut folded) = (0, 0);
    for (parent, block) in blocks.iter().zip(&blocks[1..]) {
        if block.logs.is_empty() {
            continue;
        }
        // The cursor set back under the sink (a hand edit, a writer that forgot its fence):
        // the block after it extends the cursor, but its events are stored already.
        reader
            .execute(
                "UPDATE indexer_cursor SET block_number = $1, block_hash = $2 WHERE chain_id = $3",
                &[
                    &(parent.number as i64),
                    &parent.hash.as_slice(),
                    &(CHAIN as i64),
                ],
            )
            .await
            .unwrap();
        let before = dump(&reader).await;
        let err = sink
            .apply(std::slice::from_ref(block), tip, 0)
            .await
            .unwrap_err();
        match &err {
            // The events' unique key (chain id, block hash, log index) refuses the copy.
            Error::Inconsistent(m) if m.contains("an event of the batch is already stored") => {
                unique += 1
            }
            // A block that creates a subscription is refused earlier, by the fold.
            Error::Inconsistent(m) if m.contains("created twice") => folded += 1,
            _ => panic!("block {}: unexpected {err}", block.number),
        }
        // Nothing of the block stayed: no second copy of an event, no ledger, subscription
        // or outbox change, and the cursor where it was.
        assert_same_index(&dump(&reader).await, &before);
    }
    assert!(unique > 0 && unique + folded > 5, "{unique} + {folded}");
}
