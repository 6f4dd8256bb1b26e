//! Typed request input. A route declares what it takes as a struct deriving
//! `serde::Deserialize` (camelCase names) and gets it from the query string ([`query`], or
//! the [`query_of`] filter) or from a JSON body ([`body`]); the rules every request follows
//! live here once:
//!
//! - a name the struct does not have is refused first (`parameter_unknown`, naming it), and a
//!   query parameter given twice is refused (`parameter_invalid`);
//! - a missing required field is `parameter_missing`; a value its type refuses is
//!   `parameter_invalid` with the message "`name` must be …" — the field's type says what it
//!   must be ([`FromParam`]), the name is added here.
//!
//! Field types parse themselves ([`FromParam`]); a struct names how each field is read:
//! `#[serde(default, deserialize_with = "input::param")]` for a query parameter,
//! `#[serde(default, deserialize_with = "input::field")]` for an optional body field and
//! `#[serde(deserialize_with = "input::required")]` for a required one
//! (`input::required_null_is_missing` where `null` counts as missing).

use std::fmt;

use serde::de::{self, DeserializeOwned, Error as _, IntoDeserializer, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};
use warp::Filter;
use warp::filters::BoxedFilter;

use super::codes::Code;
use super::error::ApiError;
use super::extract::query_pairs;

/// A value a request carries: parsed from a query string's text or from JSON.
pub trait FromParam: Sized {
    /// The value from query text, or `Err("must be …")`.
    fn from_text(s: &str) -> Result<Self, String>;

    /// The value from JSON: by default a JSON string read as [`FromParam::from_text`], any
    /// other JSON refused with the message the text parser gives for an empty string.
    fn from_json(v: &Value) -> Result<Self, String> {
        match v {
            Value::String(s) => Self::from_text(s),
            _ => Err(Self::from_text("")
                .err()
                .unwrap_or_else(|| "must be a string".into())),
        }
    }
}

/// `deserialize_with` for an optional query parameter (`Option<T>`, with `#[serde(default)]`).
pub fn param<'de, D: Deserializer<'de>, T: FromParam>(d: D) -> Result<Option<T>, D::Error> {
    let text = String::deserialize(d)?;
    T::from_text(&text).map(Some).map_err(de::Error::custom)
}

/// `deserialize_with` for an optional body field (`Option<T>`, with `#[serde(default)]`);
/// `null` is the same as leaving it out.
pub fn field<'de, D: Deserializer<'de>, T: FromParam>(d: D) -> Result<Option<T>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        v => T::from_json(&v).map(Some).map_err(de::Error::custom),
    }
}

/// `deserialize_with` for a required body field; `null` is a value its type refuses (the
/// field's own "must be …").
pub fn required<'de, D: Deserializer<'de>, T: FromParam>(d: D) -> Result<T, D::Error> {
    T::from_json(&Value::deserialize(d)?).map_err(de::Error::custom)
}

/// `deserialize_with` for a required body field where `null` counts as leaving it out.
pub fn required_null_is_missing<'de, D: Deserializer<'de>, T: FromParam>(
    d: D,
) -> Result<T, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Err(de::Error::custom(MISSING)),
        v => T::from_json(&v).map_err(de::Error::custom),
    }
}

/// The query string as `T`, refusing unknown and repeated parameters.
pub fn query<T: DeserializeOwned>(pairs: &[(String, String)]) -> Result<T, ApiError> {
    check_params(pairs, fields_of::<T>())?;
    let values = pairs.iter().map(|(k, v)| (k.as_str(), QueryValue(v)));
    T::deserialize(Object::new(values)).map_err(Refusal::into_api)
}

/// A filter yielding the query string as `T` (a 400 rejection when it is not one).
pub fn query_of<T: DeserializeOwned + Send + 'static>() -> BoxedFilter<(T,)> {
    query_pairs()
        .and_then(|pairs: Vec<(String, String)>| async move {
            query::<T>(&pairs).map_err(warp::reject::custom)
        })
        .boxed()
}

/// A JSON object body as `T`, refusing fields `T` does not have.
pub fn body<T: DeserializeOwned>(object: &Map<String, Value>) -> Result<T, ApiError> {
    check_fields(object, fields_of::<T>())?;
    let values = object.iter().map(|(k, v)| (k.as_str(), JsonValue(v)));
    T::deserialize(Object::new(values)).map_err(Refusal::into_api)
}

/// Rejects a JSON body field not in `known`, naming it in `param`.
fn check_fields(body: &Map<String, Value>, known: &[&str]) -> Result<(), ApiError> {
    match body.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(ApiError::Invalid {
            code: Code::ParameterUnknown,
            message: format!("unknown field `{k}`"),
            param: Some(k.clone()),
        }),
        None => Ok(()),
    }
}

/// Rejects unknown query parameters and duplicates, naming them in `param`.
fn check_params(pairs: &[(String, String)], known: &[&str]) -> Result<(), ApiError> {
    for (i, (k, _)) in pairs.iter().enumerate() {
        if !known.contains(&k.as_str()) {
            return Err(ApiError::Invalid {
                code: Code::ParameterUnknown,
                message: format!("unknown query parameter `{k}`"),
                param: Some(k.clone()),
            });
        }
        if pairs[..i].iter().any(|(p, _)| p == k) {
            return Err(ApiError::invalid(
                k,
                format!("`{k}` is given more than once"),
            ));
        }
    }
    Ok(())
}

/// A request's fields as a serde map whose value errors name their field.
struct Object<'a, I, D> {
    fields: I,
    next: Option<(&'a str, D)>,
}

impl<'a, I, D> Object<'a, I, D> {
    fn new(fields: I) -> Self {
        Object { fields, next: None }
    }
}

impl<'de, 'a, I, D> Deserializer<'de> for Object<'a, I, D>
where
    I: Iterator<Item = (&'a str, D)>,
    D: Deserializer<'de, Error = Refusal>,
{
    type Error = Refusal;

    fn deserialize_any<W: Visitor<'de>>(self, visitor: W) -> Result<W::Value, Refusal> {
        visitor.visit_map(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

impl<'de, 'a, I, D> de::MapAccess<'de> for Object<'a, I, D>
where
    I: Iterator<Item = (&'a str, D)>,
    D: Deserializer<'de, Error = Refusal>,
{
    type Error = Refusal;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Refusal> {
        let Some((key, value)) = self.fields.next() else {
            return Ok(None);
        };
        self.next = Some((key, value));
        seed.deserialize(de::value::StrDeserializer::<Refusal>::new(key))
            .map(Some)
    }

    fn next_value_seed<S: de::DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<S::Value, Refusal> {
        let (key, value) = self
            .next
            .take()
            .ok_or_else(|| Refusal::custom("a value without its name"))?;
        seed.deserialize(value).map_err(|e| e.at(key))
    }
}

/// A JSON Schema integer within `range`: `14` and `14.0` alike (a number with no fraction).
pub fn json_integer(v: &Value, range: std::ops::RangeInclusive<i64>) -> Option<i64> {
    v.as_i64()
        .or_else(|| {
            v.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 1e15)
                .map(|f| f as i64)
        })
        .filter(|n| range.contains(n))
}

/// Refuses any field of a request that takes no body, saying so.
pub fn no_fields(object: &Map<String, Value>) -> Result<(), ApiError> {
    match object.keys().next() {
        Some(k) => Err(ApiError::Invalid {
            code: Code::ParameterUnknown,
            message: format!("unknown field `{k}` (this request takes no body)"),
            param: Some(k.clone()),
        }),
        None => Ok(()),
    }
}

/// The marker a field type's error carries when a required value is `null`.
const MISSING: &str = "\u{0}missing";

/// Why a request's input was refused, as serde reports it.
#[derive(Debug)]
enum Refusal {
    Missing(String),
    Unknown(String),
    Repeated(String),
    Invalid {
        field: Option<String>,
        message: String,
    },
}

impl Refusal {
    /// Names the field the error came from, unless it names one already.
    fn at(self, key: &str) -> Self {
        match self {
            Self::Invalid {
                field: None,
                message,
            } if message == MISSING => Self::Missing(key.to_string()),
            Self::Invalid {
                field: None,
                message,
            } => Self::Invalid {
                field: Some(key.to_string()),
                message,
            },
            other => other,
        }
    }

    fn into_api(self) -> ApiError {
        match self {
            Self::Missing(name) => ApiError::missing(&name),
            Self::Unknown(name) => ApiError::Invalid {
                code: Code::ParameterUnknown,
                message: format!("unknown field `{name}`"),
                param: Some(name),
            },
            Self::Repeated(name) => {
                ApiError::invalid(&name, format!("`{name}` is given more than once"))
            }
            Self::Invalid {
                field: Some(name),
                message,
            } => ApiError::invalid(&name, format!("`{name}` {message}")),
            Self::Invalid {
                field: None,
                message,
            } => ApiError::Invalid {
                code: Code::BodyInvalid,
                message,
                param: None,
            },
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for Refusal {}

impl de::Error for Refusal {
    fn custom<M: fmt::Display>(msg: M) -> Self {
        Self::Invalid {
            field: None,
            message: msg.to_string(),
        }
    }

    fn invalid_type(_: de::Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        Self::custom(format_args!("must be {expected}"))
    }

    fn invalid_value(_: de::Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        Self::custom(format_args!("must be {expected}"))
    }

    fn missing_field(field: &'static str) -> Self {
        Self::Missing(field.to_string())
    }

    fn unknown_field(field: &str, _: &'static [&'static str]) -> Self {
        Self::Unknown(field.to_string())
    }

    fn duplicate_field(field: &'static str) -> Self {
        Self::Repeated(field.to_string())
    }
}

/// One query value: text. ([`Object`] names the field in its errors.)
struct QueryValue<'a>(&'a str);

impl<'de> IntoDeserializer<'de, Refusal> for QueryValue<'_> {
    type Deserializer = Self;
    fn into_deserializer(self) -> Self {
        self
    }
}

impl<'de> Deserializer<'de> for QueryValue<'_> {
    type Error = Refusal;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refusal> {
        visitor.visit_str(self.0)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refusal> {
        visitor.visit_some(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

/// One JSON body value. ([`Object`] names the field in its errors.)
struct JsonValue<'a>(&'a Value);

impl<'de> IntoDeserializer<'de, Refusal> for JsonValue<'_> {
    type Deserializer = Self;
    fn into_deserializer(self) -> Self {
        self
    }
}

impl<'de> Deserializer<'de> for JsonValue<'_> {
    type Error = Refusal;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refusal> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), _, _) => visitor.visit_u64(u),
                (None, Some(i), _) => visitor.visit_i64(i),
                (None, None, Some(f)) => visitor.visit_f64(f),
                (None, None, None) => Err(Refusal::custom("must be a number")),
            },
            Value::String(s) => visitor.visit_str(s),
            Value::Array(items) => {
                visitor.visit_seq(de::value::SeqDeserializer::new(items.iter().map(JsonValue)))
            }
            Value::Object(fields) => {
                let fields = fields.iter().map(|(k, v)| (k.as_str(), JsonValue(v)));
                visitor.visit_map(de::value::MapDeserializer::new(fields))
            }
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refusal> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

/// The field names a derived struct deserializes (what its `deserialize_struct` announces),
/// so that unknown names are refused before any value is looked at.
fn fields_of<T: DeserializeOwned>() -> &'static [&'static str] {
    struct Announced<'a>(&'a mut &'static [&'static str]);

    impl<'de> Deserializer<'de> for Announced<'_> {
        type Error = Refusal;

        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Refusal> {
            Err(Refusal::custom("not a struct"))
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            fields: &'static [&'static str],
            _visitor: V,
        ) -> Result<V::Value, Refusal> {
            *self.0 = fields;
            Err(Refusal::custom("announced"))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf option unit unit_struct newtype_struct seq tuple
            tuple_struct map enum identifier ignored_any
        }
    }

    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Announced(&mut fields));
    fields
}

/// Free text a merchant supplies (a plan name, a customer id, a filter): 1 to `MAX`
/// characters, not only whitespace, no control characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text<const MAX: usize>(pub String);

impl<const MAX: usize> FromParam for Text<MAX> {
    fn from_text(s: &str) -> Result<Self, String> {
        if s.trim().is_empty() {
            return Err("must not be empty".into());
        }
        if s.chars().count() > MAX {
            return Err(format!("must be at most {MAX} characters"));
        }
        if s.chars().any(char::is_control) {
            return Err("must not contain control characters".into());
        }
        Ok(Self(s.to_string()))
    }

    fn from_json(v: &Value) -> Result<Self, String> {
        v.as_str()
            .ok_or_else(|| "must be a string".to_string())
            .and_then(Self::from_text)
    }
}

/// Text customers read ([`Text`]): a plan's name, a merchant's display name. Without the
/// Unicode bidirectional controls (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069): an
/// override (`"Pro \u{202E}99.0 DSU"`) could make it read as another amount or name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisplayText<const MAX: usize>(Text<MAX>);

impl<const MAX: usize> DisplayText<MAX> {
    pub fn as_str(&self) -> &str {
        &self.0.0
    }
}

impl<const MAX: usize> FromParam for DisplayText<MAX> {
    fn from_text(s: &str) -> Result<Self, String> {
        let text = Text::<MAX>::from_text(s)?;
        let bidi = |c: char| matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}');
        if s.chars().any(bidi) {
            return Err("must not contain bidirectional control characters".into());
        }
        Ok(Self(text))
    }

    fn from_json(v: &Value) -> Result<Self, String> {
        v.as_str()
            .ok_or_else(|| "must be a string".to_string())
            .and_then(Self::from_text)
    }
}

/// A block number: a non-negative integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block(pub i64);

impl FromParam for Block {
    fn from_text(s: &str) -> Result<Self, String> {
        s.parse::<i64>()
            .ok()
            .filter(|n| *n >= 0 && !s.starts_with('+'))
            .map(Block)
            .ok_or_else(|| "must be a block number".into())
    }
}

/// An RFC 3339 time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Time(pub chrono::DateTime<chrono::Utc>);

impl FromParam for Time {
    fn from_text(s: &str) -> Result<Self, String> {
        chrono::DateTime::parse_from_rfc3339(s)
            .map(|t| Self(t.with_timezone(&chrono::Utc)))
            .map_err(|_| "must be an RFC 3339 time".into())
    }
}

/// `true` or `false` (JSON booleans; in a query, the words).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flag(pub bool);

impl FromParam for Flag {
    fn from_text(s: &str) -> Result<Self, String> {
        match s {
            "true" => Ok(Self(true)),
            "false" => Ok(Self(false)),
            _ => Err("must be true or false".into()),
        }
    }

    fn from_json(v: &Value) -> Result<Self, String> {
        v.as_bool()
            .map(Flag)
            .ok_or_else(|| "must be true or false".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Sample {
        #[serde(default, deserialize_with = "param")]
        to_block: Option<Block>,
        #[serde(deserialize_with = "required")]
        name: Text<5>,
        #[serde(default, deserialize_with = "param")]
        from_block: Option<Block>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct BodySample {
        #[serde(deserialize_with = "required_null_is_missing")]
        name: Text<5>,
        #[serde(default, deserialize_with = "field")]
        at_period_end: Option<Flag>,
    }

    fn pairs(q: &[(&str, &str)]) -> Vec<(String, String)> {
        q.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn refused(e: ApiError) -> (Code, String, Option<String>) {
        match e {
            ApiError::Invalid {
                code,
                message,
                param,
            } => (code, message, param),
            other => panic!("not a 400: {other:?}"),
        }
    }

    #[test]
    fn unknown_and_repeated_query_parameters_name_the_parameter() {
        let q = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let e = check_params(&q(&[("limit", "1"), ("x", "2")]), &["limit"]).unwrap_err();
        assert!(matches!(e, ApiError::Invalid { param: Some(ref p), .. } if p == "x"));
        let e = check_params(&q(&[("limit", "1"), ("limit", "2")]), &["limit"]).unwrap_err();
        assert!(matches!(e, ApiError::Invalid { param: Some(ref p), .. } if p == "limit"));
        assert!(check_params(&q(&[("limit", "1")]), &["limit"]).is_ok());
    }

    #[test]
    fn a_derived_struct_announces_its_camel_case_fields() {
        assert_eq!(fields_of::<Sample>(), ["toBlock", "name", "fromBlock"]);
    }

    #[test]
    fn a_query_parses_into_its_struct() {
        let s: Sample = query(&pairs(&[("name", "ab"), ("fromBlock", "7")])).unwrap();
        assert_eq!(s.name, Text("ab".into()));
        assert_eq!(s.from_block, Some(Block(7)));
        assert_eq!(s.to_block, None);
    }

    #[test]
    fn every_refusal_names_the_field_with_its_code() {
        let (code, message, param) =
            refused(query::<Sample>(&pairs(&[("name", "a"), ("toBlock", "-1")])).unwrap_err());
        assert_eq!(code, Code::ParameterInvalid);
        assert_eq!(message, "`toBlock` must be a block number");
        assert_eq!(param.as_deref(), Some("toBlock"));

        let (code, _, param) = refused(query::<Sample>(&pairs(&[("toBlock", "3")])).unwrap_err());
        assert_eq!(
            (code, param.as_deref()),
            (Code::ParameterMissing, Some("name"))
        );

        // An unknown name is refused before a bad value of a known one.
        let (code, message, param) =
            refused(query::<Sample>(&pairs(&[("toBlock", "x"), ("nope", "1")])).unwrap_err());
        assert_eq!(code, Code::ParameterUnknown);
        assert_eq!(message, "unknown query parameter `nope`");
        assert_eq!(param.as_deref(), Some("nope"));

        let (code, message, _) =
            refused(query::<Sample>(&pairs(&[("name", "a"), ("name", "b")])).unwrap_err());
        assert_eq!(code, Code::ParameterInvalid);
        assert_eq!(message, "`name` is given more than once");
    }

    #[test]
    fn a_json_body_parses_into_its_struct_and_null_is_absent() {
        let object = |v: Value| v.as_object().unwrap().clone();
        let s: BodySample = body(&object(
            serde_json::json!({"name": "ab", "atPeriodEnd": null}),
        ))
        .unwrap();
        assert_eq!((s.name.0.as_str(), s.at_period_end), ("ab", None));
        let s: BodySample = body(&object(
            serde_json::json!({"name": "ab", "atPeriodEnd": true}),
        ))
        .unwrap();
        assert_eq!(s.at_period_end, Some(Flag(true)));
        // A body's boolean is JSON's, not the word.
        let (_, message, _) = refused(
            body::<BodySample>(&object(
                serde_json::json!({"name": "a", "atPeriodEnd": "true"}),
            ))
            .unwrap_err(),
        );
        assert_eq!(message, "`atPeriodEnd` must be true or false");

        let e = body::<BodySample>(&object(serde_json::json!({"name": null}))).unwrap_err();
        assert_eq!(refused(e).0, Code::ParameterMissing);
        // With `required`, null is a value the field's type refuses.
        #[derive(Debug, Deserialize)]
        struct Strict {
            #[serde(deserialize_with = "required")]
            #[expect(dead_code, reason = "only its refusal is looked at")]
            name: Text<5>,
        }
        let (code, message, _) =
            refused(body::<Strict>(&object(serde_json::json!({"name": null}))).unwrap_err());
        assert_eq!(
            (code, message.as_str()),
            (Code::ParameterInvalid, "`name` must be a string")
        );
        let (code, message, param) =
            refused(body::<BodySample>(&object(serde_json::json!({"name": 5}))).unwrap_err());
        assert_eq!(code, Code::ParameterInvalid);
        assert_eq!(message, "`name` must be a string");
        assert_eq!(param.as_deref(), Some("name"));
        let (_, message, _) = refused(
            body::<BodySample>(&object(serde_json::json!({"name": "toolong"}))).unwrap_err(),
        );
        assert_eq!(message, "`name` must be at most 5 characters");
        let (code, message, _) = refused(
            body::<BodySample>(&object(serde_json::json!({"name": "a", "x": 1}))).unwrap_err(),
        );
        assert_eq!(
            (code, message.as_str()),
            (Code::ParameterUnknown, "unknown field `x`")
        );
    }
}
