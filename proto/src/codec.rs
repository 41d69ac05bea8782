//! The gRPC codec of every Weft service: prost's, but a message is encoded
//! into room made for its whole length at once.
//!
//! tonic's prost codec encodes into a buffer of 8 KiB that grows as the
//! message is written, doubling: a run's 10 MB state was copied again at
//! every doubling, into fresh pages that had to be faulted in. A message
//! knows its encoded length (`Message::encoded_len`, a walk of its fields
//! that reads each string's length, not its bytes), so the room is made
//! first. Decoding is prost's as it is: tonic already makes room for a
//! whole message once its length prefix has arrived.

use std::marker::PhantomData;

use prost::Message;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, EncodeBuf, Encoder};
use tonic_prost::ProstDecoder;

/// A [`Codec`] for prost messages that sizes its encoding buffer first.
#[derive(Debug, Clone, Copy)]
pub struct SizedCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for SizedCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for SizedCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = SizedEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        SizedEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::new(BufferSettings::default())
    }
}

/// Encodes a message after making room for all of it.
#[derive(Debug, Clone, Copy)]
pub struct SizedEncoder<T>(PhantomData<T>);

impl<T: Message> Encoder for SizedEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        encode_sized(&item, buf)
    }
}

/// A buffer that can make room ahead of what is written into it.
trait Room: prost::bytes::BufMut {
    fn make_room(&mut self, additional: usize);
}

impl Room for EncodeBuf<'_> {
    fn make_room(&mut self, additional: usize) {
        self.reserve(additional);
    }
}

#[cfg(test)]
impl Room for prost::bytes::BytesMut {
    fn make_room(&mut self, additional: usize) {
        self.reserve(additional);
    }
}

/// Encodes `item` into `buf` after making room for all of it.
fn encode_sized<T: Message>(item: &T, buf: &mut impl Room) -> Result<(), Status> {
    buf.make_room(item.encoded_len());
    item.encode(buf)
        .map_err(|error| Status::internal(format!("encoding a message: {error}")))
}

#[cfg(test)]
mod tests {
    use prost::bytes::BytesMut;

    use super::*;
    use crate::v1::SubmitRequest;

    #[test]
    fn a_message_is_encoded_into_room_made_once_as_prost_encodes_it() {
        let request = SubmitRequest {
            input_json: format!("{{\"blob\":\"{}\"}}", "x".repeat(1 << 20)),
            ..SubmitRequest::default()
        };
        // tonic's buffer as it starts: 8 KiB, a frame header written.
        let mut bytes = BytesMut::with_capacity(8 << 10);
        bytes.extend_from_slice(&[0; 5]);
        encode_sized(&request, &mut bytes).unwrap();
        assert_eq!(&bytes[5..], request.encode_to_vec().as_slice());
        // Grown once, to the message's length: not doubled past it.
        assert_eq!(bytes.capacity(), bytes.len(), "grown while encoded");
    }
}
