//! Binary `COPY … FROM STDIN`: rows encoded with each column's `ToSql` straight into the COPY
//! stream, sent in chunks of about [`CHUNK`] bytes. Postgres then parses no text and plans no
//! statement per batch: the indexer's event rows go in at close to the speed of a plain COPY.
//! Values of `NUMERIC` columns go through [`Numeric`].

use alloy::primitives::U256;
use bytes::{BufMut, Bytes, BytesMut};
use futures::SinkExt;
use tokio_postgres::Transaction;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

use crate::{Error, Result};

/// About how many bytes go to the server per COPY message (the connection keeps no more).
pub const CHUNK: usize = 256 * 1024;

/// The rows of one binary COPY, encoded as they are written.
pub struct BinaryRows {
    types: &'static [Type],
    buf: BytesMut,
    rows: u64,
}

impl BinaryRows {
    /// An empty stream of rows of these column types (the header written).
    pub fn new(types: &'static [Type]) -> Self {
        let mut buf = BytesMut::with_capacity(CHUNK + CHUNK / 4);
        buf.put_slice(b"PGCOPY\n\xff\r\n\0");
        buf.put_i32(0); // flags
        buf.put_i32(0); // header extension length
        Self {
            types,
            buf,
            rows: 0,
        }
    }

    /// Appends one row: a value per column, in the column order given to [`BinaryRows::new`].
    pub fn row(&mut self, values: &[&(dyn ToSql + Sync)]) -> Result<()> {
        if values.len() != self.types.len() {
            return Err(Error::Inconsistent(format!(
                "a COPY row of {} values for {} columns",
                values.len(),
                self.types.len()
            )));
        }
        self.buf.put_i16(values.len() as i16);
        for (v, ty) in values.iter().zip(self.types) {
            let at = self.buf.len();
            self.buf.put_i32(0);
            let len = match v
                .to_sql_checked(ty, &mut self.buf)
                .map_err(|e| Error::Inconsistent(format!("COPY value of type {ty}: {e}")))?
            {
                IsNull::Yes => -1,
                IsNull::No => i32::try_from(self.buf.len() - at - 4)
                    .map_err(|_| Error::Inconsistent("COPY value over 2 GB".into()))?,
            };
            self.buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
        }
        self.rows += 1;
        Ok(())
    }

    /// The encoded bytes so far when there are at least [`CHUNK`] of them.
    fn full_chunk(&mut self) -> Option<Bytes> {
        (self.buf.len() >= CHUNK).then(|| self.buf.split().freeze())
    }

    /// The rest, with the trailer.
    fn finish(mut self) -> Bytes {
        self.buf.put_i16(-1);
        self.buf.freeze()
    }
}

/// Runs `COPY … FROM STDIN (FORMAT binary)` (`statement`) in `tx` with the rows `fill`
/// writes, sending each full chunk as it is made. Returns the number of rows copied.
pub async fn copy_in<T>(
    tx: &Transaction<'_>,
    statement: &str,
    types: &'static [Type],
    items: impl IntoIterator<Item = T>,
    mut fill: impl FnMut(&mut BinaryRows, T) -> Result<()>,
) -> Result<u64> {
    let sink = tx.copy_in::<_, Bytes>(statement).await?;
    futures::pin_mut!(sink);
    let mut rows = BinaryRows::new(types);
    for item in items {
        fill(&mut rows, item)?;
        if let Some(chunk) = rows.full_chunk() {
            sink.send(chunk).await?;
        }
    }
    let expected = rows.rows;
    sink.send(rows.finish()).await?;
    let copied = sink.finish().await?;
    if copied != expected {
        return Err(Error::Inconsistent(format!(
            "COPY took {copied} of {expected} rows"
        )));
    }
    Ok(copied)
}

/// A `uint256` as a Postgres `NUMERIC` in its binary form (base-10000 digits): what token
/// amounts are stored as, without a text round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Numeric(pub U256);

impl ToSql for Numeric {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        // Base-10000 digits, most significant first, without trailing zero digits (a value's
        // scale is 0, so those are implied by the weight).
        let mut digits: Vec<i16> = Vec::with_capacity(20);
        let mut v = self.0;
        let base = U256::from(10_000u64);
        while !v.is_zero() {
            let (q, r) = v.div_rem(base);
            digits.push(r.to::<u64>() as i16);
            v = q;
        }
        let weight = digits.len().saturating_sub(1) as i16;
        digits.reverse();
        while digits.last() == Some(&0) {
            digits.pop();
        }
        out.put_i16(digits.len() as i16);
        out.put_i16(weight);
        out.put_i16(0); // sign: positive
        out.put_i16(0); // display scale
        for d in digits {
            out.put_i16(d);
        }
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::NUMERIC
    }

    to_sql_checked!();
}
