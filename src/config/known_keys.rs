//! The keys a config file may hold, read off the parser's own structs, so
//! that the example config and the reference page can be checked against
//! them and never drift.

use serde::de::{DeserializeOwned, Error, Visitor, value};

use super::file::{
    AppLayer, BookkeepingLayer, CacheLayer, DatabaseLayer, FailedLayer, HandlerEntry, HorizonLayer,
    Layer, MetricsLayer, PulseLayer, QueueLayer, RedisLayer, SqsLayer, WorkerLayer,
};

/// Every section (`handlers` for `[[handlers]]`) with its keys, in the
/// order of the file's structs.
pub fn sections() -> Vec<(&'static str, &'static [&'static str])> {
    vec![
        ("app", fields::<AppLayer>()),
        ("redis", fields::<RedisLayer>()),
        ("queue", fields::<QueueLayer>()),
        ("database", fields::<DatabaseLayer>()),
        ("sqs", fields::<SqsLayer>()),
        ("cache", fields::<CacheLayer>()),
        ("failed", fields::<FailedLayer>()),
        ("worker", fields::<WorkerLayer>()),
        ("metrics", fields::<MetricsLayer>()),
        ("horizon", fields::<HorizonLayer>()),
        ("pulse", fields::<PulseLayer>()),
        ("bookkeeping", fields::<BookkeepingLayer>()),
        ("handlers", fields::<HandlerEntry>()),
    ]
}

/// The top-level names of a config file (the sections), as the parser
/// knows them: equal to the names [`sections`] gives, or a section was
/// added to the file without being listed there.
pub fn top_level() -> &'static [&'static str] {
    fields::<Layer>()
}

/// The field names of struct `T` as serde knows them (renames applied): a
/// deserializer that records what `deserialize_struct` is asked for. A
/// type that is not a struct with named fields gives none.
fn fields<T: DeserializeOwned>() -> &'static [&'static str] {
    struct Fields(Option<&'static [&'static str]>);

    impl<'de> serde::Deserializer<'de> for &mut Fields {
        type Error = value::Error;

        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, value::Error> {
            Err(value::Error::custom("not a struct"))
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, value::Error> {
            self.0 = Some(fields);
            Err(value::Error::custom("fields recorded"))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf option unit unit_struct newtype_struct seq tuple
            tuple_struct map enum identifier ignored_any
        }
    }

    let mut recorder = Fields(None);
    let _ = T::deserialize(&mut recorder);
    recorder.0.unwrap_or(&[])
}
