//! The sink writes a block's events once, whatever its caller does: a batch is tied to the
//! cursor it extends, and an event is stored at most once — its unique keys, (chain id, block
//! hash, log index) and the public id derived from them, refuse a second copy, and the batch
//! that carried it fails whole, cursor included. (Dropping both keys makes the second test
//! fail; either one alone still refuses the copy.)

use std::sync::Arc;

use crate::common::fake::{FakeChain, Faults};
use crate::common::*;
use alloy::primitives::Address;
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
    let epoch = writer::claim_cursor(&client, CHAIN, CONTRACT, genesis)
        .await
        .unwrap();
    (
        Sink::new(client, CHAIN, CONTRACT, epoch, 2),
        db.connect().await,
    )
}

fn events(blocks: &[Block]) -> usize {
    blocks.iter().map(|b| b.logs.len()).sum()
}

#[tokio::test]
async fn a_batch_applied_again_is_refused_and_writes_nothing() {
    let (genesis, blocks) = chain_blocks(40).await;
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
    // The sink still extends the cursor it refused to rewrite.
    assert_eq!(cursor(&reader).await.map(|(n, _)| n as u64), Some(tip));
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
