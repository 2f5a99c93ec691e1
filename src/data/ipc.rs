//! Arrow IPC in and out: uploads arrive as an IPC stream under their own size cap, results
//! leave as an IPC file (what the clients' `pa.ipc.open_file` expects).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arrow_array::{RecordBatch, RecordBatchIterator, RecordBatchReader};
use arrow_buffer::Buffer;
use arrow_ipc::reader::StreamDecoder;
use arrow_ipc::writer::FileWriter;
use arrow_schema::SchemaRef;
use axum::body::{Body, BodyDataStream, HttpBody};
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use lance::deps::datafusion::error::{DataFusionError, Result as DfResult};
use lance::deps::datafusion::execution::SendableRecordBatchStream;
use lance::deps::datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use tokio::sync::mpsc;

use crate::error::{Error, Result};

/// A decoded upload: its schema (also when it carries no batches) and its rows.
#[derive(Clone, Debug)]
pub struct Upload {
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
}

impl Upload {
    pub fn rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }

    pub fn reader(self) -> Box<dyn RecordBatchReader + Send> {
        Box::new(RecordBatchIterator::new(
            self.batches.into_iter().map(Ok),
            self.schema,
        ))
    }
}

/// Rows for a writer, as a stream Lance takes, with a count of the rows it has passed on.
pub struct Rows {
    pub stream: SendableRecordBatchStream,
    pub count: Arc<AtomicU64>,
}

impl Rows {
    fn of<S>(schema: SchemaRef, batches: S) -> Rows
    where
        S: futures::Stream<Item = DfResult<RecordBatch>> + Send + 'static,
    {
        let count = Arc::new(AtomicU64::new(0));
        let counted = count.clone();
        let batches = batches.inspect(move |b| {
            if let Ok(b) = b {
                counted.fetch_add(b.num_rows() as u64, Ordering::Relaxed);
            }
        });
        Rows {
            stream: Box::pin(RecordBatchStreamAdapter::new(schema, batches)),
            count,
        }
    }
}

impl From<Upload> for Rows {
    fn from(upload: Upload) -> Rows {
        Rows::of(
            upload.schema,
            futures::stream::iter(upload.batches.into_iter().map(Ok)),
        )
    }
}

/// An upload whose batches are still arriving: a writer takes them as the `Feed` decodes
/// them, so a large upload is written while the rest of it is on the wire, and held in
/// memory a few batches at a time.
pub struct Arriving {
    pub schema: SchemaRef,
    batches: mpsc::Receiver<RecordBatch>,
    ended: Arc<AtomicBool>,
}

/// Uploads whose batches take up to this much memory are gathered whole before their write
/// starts; past it, the write starts with what has arrived and takes the rest as it comes, so
/// a large upload is held a few batches at a time. (On two cores, writing every upload as it
/// arrived was no faster than gathering it first: client, kernel and writer share the cores.)
pub const GATHER_BYTES: usize = 64 * 1024 * 1024;

impl Arriving {
    /// Waits for the whole upload (the `Feed` must run meanwhile).
    pub async fn gather(mut self) -> Result<Upload> {
        let mut batches = Vec::new();
        while let Some(batch) = self.batches.recv().await {
            batches.push(batch);
        }
        self.whole(batches)
    }

    /// The rows for a writer: the whole upload when its batches fit in `limit` bytes,
    /// else the batches so far followed by the rest as it arrives.
    pub async fn rows(self, limit: usize) -> Result<Rows> {
        match self.gather_up_to(limit).await? {
            (upload, None) => Ok(upload.into()),
            (held, Some(rest)) => {
                let stream = futures::stream::iter(held.batches.into_iter().map(Ok))
                    .chain(rest.into_stream());
                Ok(Rows::of(held.schema, stream))
            }
        }
    }

    /// Takes batches until the upload ends (the whole of it, and None) or they pass
    /// `limit` bytes (those batches, and the rest of the upload).
    async fn gather_up_to(mut self, limit: usize) -> Result<(Upload, Option<Arriving>)> {
        let mut batches = Vec::new();
        let mut bytes = 0usize;
        while bytes <= limit {
            let Some(batch) = self.batches.recv().await else {
                return Ok((self.whole(batches)?, None));
            };
            bytes = bytes.saturating_add(batch.get_array_memory_size());
            batches.push(batch);
        }
        let held = Upload {
            schema: self.schema.clone(),
            batches,
        };
        Ok((held, Some(self)))
    }

    /// The upload, once its batches have all been taken: whole only if the feed saw it end
    /// as a whole Arrow stream.
    fn whole(self, batches: Vec<RecordBatch>) -> Result<Upload> {
        if !self.ended.load(Ordering::Acquire) {
            return Err(cut_short());
        }
        Ok(Upload {
            schema: self.schema,
            batches,
        })
    }

    /// The batches as they arrive. The stream ends cleanly only after the upload's last
    /// byte has been read and found a whole Arrow stream; an upload cut short, refused or
    /// abandoned (the request dropped) ends it with an error instead, so the writer commits
    /// nothing.
    fn into_stream(self) -> impl futures::Stream<Item = DfResult<RecordBatch>> + Send + 'static {
        let Arriving { batches, ended, .. } = self;
        futures::stream::unfold(Some(batches), move |open| {
            let ended = ended.clone();
            async move {
                let mut batches = open?;
                match batches.recv().await {
                    Some(batch) => Some((Ok(batch), Some(batches))),
                    None if ended.load(Ordering::Acquire) => None,
                    None => Some((Err(DataFusionError::Execution(cut_short().message)), None)),
                }
            }
        })
    }
}

impl From<Arriving> for Rows {
    /// Every batch as it arrives (see `Arriving::into_stream`).
    fn from(arriving: Arriving) -> Rows {
        let schema = arriving.schema.clone();
        Rows::of(schema, arriving.into_stream())
    }
}

fn cut_short() -> Error {
    Error::invalid("the Arrow upload ended before its end-of-stream or could not be read")
}

/// Reads the rest of an upload after its schema, decoding each batch as its last byte
/// arrives and handing it to the `Arriving` side.
pub struct Feed {
    frames: BodyDataStream,
    framer: Framer,
    decoder: StreamDecoder,
    /// Batches decoded and not yet handed on.
    ready: Vec<RecordBatch>,
    batches: mpsc::Sender<RecordBatch>,
    ended: Arc<AtomicBool>,
}

/// Batches decoded ahead of the writer; the body's reading waits (and TCP holds the client)
/// when the writer is this far behind.
const BATCHES_AHEAD: usize = 2;

/// Starts reading an Arrow IPC stream body of at most `cap` bytes: answers once its schema
/// has arrived, with the batches to come and the `Feed` that reads them, which must run
/// beside the writer. A body that is not an Arrow stream, or is empty, or has no columns, is
/// refused here, before anything is written; one past the cap is refused when it says so
/// (in its Content-Length, or in a message's length) or when it gets there.
pub async fn stream_upload(body: Body, cap: usize) -> Result<(Arriving, Feed)> {
    let known = HttpBody::size_hint(&body)
        .exact()
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    if known.is_some_and(|n| n > cap) {
        return Err(too_large(cap));
    }
    let (sender, receiver) = mpsc::channel(BATCHES_AHEAD);
    let mut feed = Feed {
        frames: body.into_data_stream(),
        framer: Framer::new(cap, known),
        decoder: StreamDecoder::new(),
        ready: Vec::new(),
        batches: sender,
        ended: Arc::new(AtomicBool::new(false)),
    };
    // The decoder takes in a schema message whole only with the next message's bytes, so
    // the first batch may come out with the schema: it waits in `ready`.
    while feed.decoder.schema().is_none() {
        if let Some(message) = feed.framer.next()? {
            feed.decode(message)?;
        } else {
            match feed.frames.next().await {
                Some(frame) => feed.accept(frame)?,
                None => {
                    feed.finish()?;
                    break;
                }
            }
        }
    }
    let schema = feed
        .decoder
        .schema()
        .ok_or_else(|| Error::invalid("the Arrow IPC stream has no schema"))?;
    if schema.fields().is_empty() {
        return Err(Error::invalid(
            "the Arrow IPC stream's schema has no columns",
        ));
    }
    let arriving = Arriving {
        schema,
        batches: receiver,
        ended: feed.ended.clone(),
    };
    Ok((arriving, feed))
}

/// Reads a whole Arrow IPC stream body of at most `cap` bytes (for writers that need every
/// row before they start).
pub async fn read_upload(body: Body, cap: usize) -> Result<Upload> {
    let (arriving, feed) = stream_upload(body, cap).await?;
    let (upload, fed) = tokio::join!(arriving.gather(), feed.run());
    fed?;
    upload
}

impl Feed {
    /// Reads and hands on every batch to the end of the body. An error (a body that breaks
    /// off, is not an Arrow stream or passes the cap) is answered here; the `Arriving` side
    /// then sees the stream end without its last mark and fails its write. When the writer
    /// stops taking batches (it failed), the rest of the body is not read.
    pub async fn run(mut self) -> Result<()> {
        loop {
            if !self.hand_on().await {
                return Ok(());
            }
            if let Some(message) = self.framer.next()? {
                self.decode(message)?;
                continue;
            }
            let frame = tokio::select! {
                frame = self.frames.next() => frame,
                // The writer stopped (it failed): the rest of the body is not needed.
                _ = self.batches.closed() => return Ok(()),
            };
            match frame {
                Some(frame) => self.accept(frame)?,
                None => break,
            }
        }
        self.finish()?;
        if !self.hand_on().await {
            return Ok(());
        }
        self.ended.store(true, Ordering::Release);
        Ok(())
    }

    /// Hands the decoded batches on; false when the writer has stopped taking them.
    async fn hand_on(&mut self) -> bool {
        for batch in std::mem::take(&mut self.ready) {
            if self.batches.send(batch).await.is_err() {
                return false;
            }
        }
        true
    }

    fn accept(&mut self, frame: std::result::Result<Bytes, axum::Error>) -> Result<()> {
        let frame = frame.map_err(|e| {
            Error::invalid("the request body could not be read").with_detail(e.to_string())
        })?;
        self.framer.push(frame)
    }

    /// Decodes one message. A message with no body (a schema, or a batch whose columns
    /// need no buffers) is finished by the decoder only when the next bytes come, so one
    /// message may give two batches.
    fn decode(&mut self, message: Bytes) -> Result<()> {
        let mut buffer = Buffer::from(message);
        while !buffer.is_empty() {
            if let Some(batch) = self.decoder.decode(&mut buffer).map_err(not_a_stream)? {
                self.ready.push(batch);
            }
        }
        Ok(())
    }

    /// Checks the body ended as a whole Arrow stream: at a message's end, with or without
    /// the end-of-stream mark (which the Arrow format leaves optional).
    fn finish(&mut self) -> Result<()> {
        if self.framer.seen == 0 {
            return Err(Error::invalid(
                "the request body must be an Arrow IPC stream (it is empty)",
            ));
        }
        if let Some(rest) = self.framer.rest() {
            self.decode(rest)?;
        }
        self.decoder.finish().map_err(not_a_stream)
    }
}

fn too_large(cap: usize) -> Error {
    Error::invalid(format!(
        "the Arrow upload is larger than the limit of {cap} bytes (max-arrow-body-bytes)"
    ))
}

fn not_a_stream(e: arrow_schema::ArrowError) -> Error {
    Error::invalid("the request body is not an Arrow IPC stream").with_detail(e.to_string())
}

/// Cuts an Arrow IPC stream into whole messages, each gathered into one buffer of its own
/// size once its header gives that size. The decoder then takes every batch's columns as
/// slices of it: one copy from the wire in all. (Given a message in pieces, the decoder
/// gathers it in a buffer grown by doubling, copied and page-faulted at every step: a third
/// of the time of a 25 MB upload, measured.) Pieces wait in a queue until the message they
/// belong to is known, so no buffer ever grows past its message.
struct Framer {
    queue: VecDeque<Bytes>,
    /// The front message, gathered so far, and its whole length once its header is read.
    message: BytesMut,
    want: Option<usize>,
    /// Bytes received, bytes already handed on, the most the upload may have, and its
    /// Content-Length when it gave one.
    seen: usize,
    taken: usize,
    cap: usize,
    declared: Option<usize>,
}

const CONTINUATION: [u8; 4] = [0xff; 4];

impl Framer {
    fn new(cap: usize, declared: Option<usize>) -> Self {
        Framer {
            queue: VecDeque::new(),
            // A body of known length gets one buffer for all its messages, each cut from its
            // front in turn (a fresh buffer per message page-faulted every one in again:
            // about a third slower for a 25 MB upload in three messages, measured).
            message: declared.map(BytesMut::with_capacity).unwrap_or_default(),
            want: None,
            seen: 0,
            taken: 0,
            cap,
            declared,
        }
    }

    fn push(&mut self, frame: Bytes) -> Result<()> {
        self.seen += frame.len();
        if self.seen > self.cap {
            return Err(too_large(self.cap));
        }
        if !frame.is_empty() {
            self.queue.push_back(frame);
        }
        Ok(())
    }

    /// The next whole message (or end-of-stream mark), if it has all arrived. Bytes that
    /// are not a message header are left for the decoder to refuse.
    fn next(&mut self) -> Result<Option<Bytes>> {
        if let Some(total) = self.want {
            return Ok(self.gather(total).then(|| self.take(total)));
        }
        if !self.gather(4) {
            return Ok(None);
        }
        let (prefix, at) = if self.message[..4] == CONTINUATION {
            (8, 4)
        } else {
            (4, 0)
        };
        if !self.gather(prefix) {
            return Ok(None);
        }
        let mut word = [0u8; 4];
        word.copy_from_slice(&self.message[at..at + 4]);
        let metadata = u32::from_le_bytes(word) as usize;
        if metadata == 0 {
            return Ok(Some(self.take(prefix)));
        }
        // Not reserved ahead: a header's length is the first thing garbage gets wrong.
        let head = prefix.saturating_add(metadata);
        if !self.gather(head) {
            return Ok(None);
        }
        let body = arrow_ipc::root_as_message(&self.message[prefix..head])
            .map_err(|e| {
                Error::invalid("the request body is not an Arrow IPC stream")
                    .with_detail(e.to_string())
            })?
            .bodyLength();
        let total = usize::try_from(body)
            .ok()
            .and_then(|b| b.checked_add(head))
            .ok_or_else(|| Error::invalid("an Arrow IPC message has a negative length"))?;
        // A message that says it is longer than the upload may be, or than the body said it
        // is, is refused before its room is reserved.
        let end = self.taken.saturating_add(total);
        if end > self.cap {
            return Err(too_large(self.cap));
        }
        if self.declared.is_some_and(|declared| end > declared) {
            return Err(Error::invalid(
                "the request body is not an Arrow IPC stream: a message is longer than the body",
            ));
        }
        self.message.reserve(total - self.message.len());
        self.want = Some(total);
        if !self.gather(total) {
            return Ok(None);
        }
        Ok(Some(self.take(total)))
    }

    /// Moves queued bytes into the front message until it holds `n` (true), or the queue
    /// runs dry (false).
    fn gather(&mut self, n: usize) -> bool {
        while self.message.len() < n {
            let Some(front) = self.queue.front_mut() else {
                return false;
            };
            let part = front.split_to((n - self.message.len()).min(front.len()));
            self.message.extend_from_slice(&part);
            if front.is_empty() {
                self.queue.pop_front();
            }
        }
        true
    }

    fn take(&mut self, n: usize) -> Bytes {
        self.want = None;
        self.taken += n;
        self.message.split_to(n).freeze()
    }

    /// Whatever is left once the body has ended (a whole stream leaves nothing).
    fn rest(&mut self) -> Option<Bytes> {
        self.gather(usize::MAX);
        (!self.message.is_empty()).then(|| self.message.split().freeze())
    }
}

/// Encodes batches as an Arrow IPC file.
pub fn encode_file(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut writer = FileWriter::try_new(&mut out, schema)
        .map_err(|e| Error::internal("could not encode the result", e))?;
    for batch in batches {
        writer
            .write(batch)
            .map_err(|e| Error::internal("could not encode the result", e))?;
    }
    writer
        .finish()
        .map_err(|e| Error::internal("could not encode the result", e))?;
    drop(writer);
    Ok(out)
}

/// An empty schema's Arc, for results with no columns.
pub fn empty_schema() -> SchemaRef {
    Arc::new(arrow_schema::Schema::empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int64Array;
    use arrow_ipc::writer::StreamWriter;
    use arrow_schema::{DataType, Field, Schema};

    fn stream(batches: usize) -> Bytes {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let mut out = Vec::new();
        let mut w = StreamWriter::try_new(&mut out, &schema).unwrap();
        for i in 0..batches {
            let b = RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(Int64Array::from(vec![i as i64, 1, 2]))],
            )
            .unwrap();
            w.write(&b).unwrap();
        }
        w.finish().unwrap();
        drop(w);
        Bytes::from(out)
    }

    async fn decode_stream(bytes: Bytes) -> Result<Upload> {
        read_upload(Body::from(bytes), usize::MAX).await
    }

    #[tokio::test]
    async fn a_zero_batch_stream_keeps_its_schema() {
        let up = decode_stream(stream(0)).await.unwrap();
        assert_eq!(up.rows(), 0);
        assert_eq!(up.schema.field(0).name(), "x");
        assert_eq!(decode_stream(stream(2)).await.unwrap().rows(), 6);
    }

    #[tokio::test]
    async fn garbage_and_truncation_are_invalid_input() {
        for body in [
            Bytes::new(),
            Bytes::from_static(b"{\"not\":\"arrow\"}"),
            stream(2).slice(0..40),
        ] {
            let e = decode_stream(body).await.unwrap_err();
            assert_eq!(e.code, crate::error::Code::InvalidInput);
        }
    }

    #[tokio::test]
    async fn an_upload_past_the_cap_names_the_limit() {
        let e = read_upload(Body::from(stream(50)), 256).await.unwrap_err();
        assert!(e.message.contains("256 bytes"), "{}", e.message);
        // Without a Content-Length: refused when a message says it would pass the cap.
        let e = read_upload(in_pieces(stream(50), 64), 256)
            .await
            .unwrap_err();
        assert!(e.message.contains("256 bytes"), "{}", e.message);
    }

    /// A body without a Content-Length, arriving `size` bytes at a time.
    fn in_pieces(bytes: Bytes, size: usize) -> Body {
        let pieces: Vec<std::io::Result<Bytes>> = bytes
            .chunks(size)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        Body::from_stream(futures::stream::iter(pieces))
    }

    #[tokio::test]
    async fn a_body_in_any_pieces_decodes_to_the_same_rows() {
        for size in [1, 3, 8, 100, 1 << 20] {
            let up = read_upload(in_pieces(stream(5), size), usize::MAX)
                .await
                .unwrap();
            assert_eq!(up.batches.len(), 5, "pieces of {size}");
            assert_eq!(up.rows(), 15);
            let firsts: Vec<i64> = up
                .batches
                .iter()
                .map(|b| {
                    b.column(0)
                        .as_any()
                        .downcast_ref::<Int64Array>()
                        .unwrap()
                        .value(0)
                })
                .collect();
            assert_eq!(firsts, vec![0, 1, 2, 3, 4]);
        }
    }

    #[tokio::test]
    async fn batches_without_a_body_are_all_kept() {
        // A column of nulls has no buffers: its batches' messages have no body, and the
        // decoder finishes each only when the next message comes.
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Null, true)]));
        let mut out = Vec::new();
        let mut w = StreamWriter::try_new(&mut out, &schema).unwrap();
        for rows in [3, 4, 5] {
            let b = RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(arrow_array::NullArray::new(rows))],
            )
            .unwrap();
            w.write(&b).unwrap();
        }
        w.finish().unwrap();
        drop(w);
        for size in [1, 7, 1 << 20] {
            let up = read_upload(in_pieces(Bytes::from(out.clone()), size), usize::MAX)
                .await
                .unwrap();
            assert_eq!(up.rows(), 12, "pieces of {size}");
        }
    }

    /// Every item of a writer's stream, and whether it ended with an error.
    async fn drain(rows: Rows) -> (usize, bool) {
        let items: Vec<_> = rows.stream.collect().await;
        let failed = items.last().is_some_and(|i| i.is_err());
        (items.iter().filter(|i| i.is_ok()).count(), failed)
    }

    #[tokio::test]
    async fn a_writer_sees_an_error_not_an_end_when_the_upload_breaks_off() {
        let whole = stream(3);
        // Cut inside the last batch: two whole batches reach the writer, then an error.
        let cut = whole.slice(0..whole.len() - 40);
        let (arriving, feed) = stream_upload(in_pieces(cut, 50), usize::MAX).await.unwrap();
        let (drained, fed) = tokio::join!(drain(arriving.into()), feed.run());
        assert_eq!(fed.unwrap_err().code, crate::error::Code::InvalidInput);
        assert_eq!(drained, (2, true));

        // The request dropped mid-upload (a timeout, a closed connection): an error too.
        let (arriving, feed) = stream_upload(in_pieces(whole.clone(), 50), usize::MAX)
            .await
            .unwrap();
        drop(feed);
        assert!(drain(arriving.into()).await.1);

        // The whole upload: every batch, a clean end, and the rows counted.
        let (arriving, feed) = stream_upload(in_pieces(whole, 50), usize::MAX)
            .await
            .unwrap();
        let rows: Rows = arriving.into();
        let count = rows.count.clone();
        let (drained, fed) = tokio::join!(drain(rows), feed.run());
        fed.unwrap();
        assert_eq!(drained, (3, false));
        assert_eq!(count.load(Ordering::Relaxed), 9);
    }

    #[tokio::test]
    async fn an_upload_past_the_gathering_limit_goes_on_as_a_stream() {
        // Held whole, or held in part and then streamed: the same rows, a clean end for a
        // whole upload, an error for one cut short.
        for limit in [usize::MAX, 1] {
            let (arriving, feed) = stream_upload(in_pieces(stream(5), 50), usize::MAX)
                .await
                .unwrap();
            let take = async { drain(arriving.rows(limit).await.unwrap()).await };
            let (drained, fed) = tokio::join!(take, feed.run());
            fed.unwrap();
            assert_eq!(drained, (5, false), "limit {limit}");

            let whole = stream(5);
            let cut = whole.slice(0..whole.len() - 40);
            let (arriving, feed) = stream_upload(in_pieces(cut, 50), usize::MAX).await.unwrap();
            let take = async {
                match arriving.rows(limit).await {
                    Ok(rows) => drain(rows).await.1,
                    Err(_) => true,
                }
            };
            let (failed, fed) = tokio::join!(take, feed.run());
            assert!(fed.is_err() && failed, "limit {limit}");
        }
    }
}
