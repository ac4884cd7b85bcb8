//! Reading replies, for clients and tests, through the `redis-protocol` crate.
//!
//! The server never decodes replies; this module exists so that the client and
//! the test suite read what the server wrote with an independent, widely used
//! decoder rather than with the encoder's own assumptions.

use bytes::BytesMut;
use redis_protocol::resp3::decode::complete::decode_bytes_mut;
use redis_protocol::resp3::types::BytesFrame;

use crate::reply::Reply;

/// Why a reply could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyDecodeError(pub String);

impl std::fmt::Display for ReplyDecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid reply: {}", self.0)
    }
}

impl std::error::Error for ReplyDecodeError {}

/// Decodes one RESP2 or RESP3 reply from the front of `buf`.
///
/// `Ok(None)` means the reply is not complete yet; nothing is consumed.
/// The RESP2 decoder is tried first (RESP3 has no `$-1`/`*-1` nulls), then
/// RESP3 for the types only it has (`_`, `%`, `~`, `#`, `,`, `=`, ...).
///
/// # Errors
/// [`ReplyDecodeError`] when the bytes are valid in neither version.
pub fn decode_reply(buf: &mut BytesMut) -> Result<Option<Reply>, ReplyDecodeError> {
    match redis_protocol::resp2::decode::decode_bytes_mut(buf) {
        Ok(Some((frame, _, _))) => return Ok(Some(from_resp2(frame))),
        Ok(None) => return Ok(None),
        Err(_) => {}
    }
    match decode_bytes_mut(buf) {
        Ok(Some((frame, _, _))) => Ok(Some(from_frame(frame)?)),
        Ok(None) => Ok(None),
        Err(e) => Err(ReplyDecodeError(e.to_string())),
    }
}

fn from_resp2(frame: redis_protocol::resp2::types::BytesFrame) -> Reply {
    use redis_protocol::resp2::types::BytesFrame as F;
    match frame {
        F::SimpleString(s) => Reply::Simple(String::from_utf8_lossy(&s).into_owned().into()),
        F::Error(e) => Reply::Error(e.to_string().into()),
        F::Integer(i) => Reply::Int(i),
        F::BulkString(b) => Reply::Bulk(b),
        F::Array(items) => Reply::Array(items.into_iter().map(from_resp2).collect()),
        F::Null => Reply::Nil,
    }
}

fn from_frame(frame: BytesFrame) -> Result<Reply, ReplyDecodeError> {
    Ok(match frame {
        BytesFrame::SimpleString { data, .. } => {
            Reply::Simple(String::from_utf8_lossy(&data).into_owned().into())
        }
        BytesFrame::SimpleError { data, .. } => Reply::Error(data.to_string().into()),
        BytesFrame::BlobError { data, .. } => {
            Reply::Error(String::from_utf8_lossy(&data).into_owned().into())
        }
        BytesFrame::Number { data, .. } => Reply::Int(data),
        BytesFrame::BlobString { data, .. } => Reply::Bulk(data),
        BytesFrame::Null => Reply::Nil,
        BytesFrame::Double { data, .. } => Reply::Double(data),
        BytesFrame::Boolean { data, .. } => Reply::Bool(data),
        BytesFrame::VerbatimString { data, .. } => Reply::Verbatim("txt", data),
        BytesFrame::BigNumber { data, .. } => Reply::Bulk(data),
        BytesFrame::Array { data, .. } => {
            Reply::Array(data.into_iter().map(from_frame).collect::<Result<_, _>>()?)
        }
        BytesFrame::Push { data, .. } => {
            Reply::Push(data.into_iter().map(from_frame).collect::<Result<_, _>>()?)
        }
        BytesFrame::Set { data, .. } => {
            Reply::Set(data.into_iter().map(from_frame).collect::<Result<_, _>>()?)
        }
        BytesFrame::Map { data, .. } => Reply::Map(
            data.into_iter()
                .map(|(k, v)| Ok((from_frame(k)?, from_frame(v)?)))
                .collect::<Result<_, ReplyDecodeError>>()?,
        ),
        other => return Err(ReplyDecodeError(format!("unsupported frame {other:?}"))),
    })
}
