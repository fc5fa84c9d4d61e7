//! Element types: the closed set of plain-old-data scalars a buffer may hold.

use std::fmt;

/// Runtime tag of an element type, carried by every [`ArrayRequest`](crate::ArrayRequest).
///
/// The set is closed: it matches the scalars CUDA kernels of batch solvers use
/// (cubie's f32, f64 and i32, plus byte and wide integer types).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 64-bit IEEE float.
    F64,
    /// 32-bit signed integer.
    I32,
    /// Unsigned byte.
    U8,
    /// 32-bit unsigned integer.
    U32,
    /// 64-bit signed integer.
    I64,
    /// 64-bit unsigned integer.
    U64,
}

impl DType {
    /// Every element type, in declaration order.
    pub const ALL: [DType; 7] = [
        DType::F32,
        DType::F64,
        DType::I32,
        DType::U8,
        DType::U32,
        DType::I64,
        DType::U64,
    ];

    /// Size of one element in bytes.
    pub const fn size_bytes(self) -> usize {
        match self {
            DType::U8 => 1,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }

    /// The Rust name of the element type (`"f32"`, `"i64"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::U8 => "u8",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::U64 => "u64",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A scalar type a device or pinned buffer may hold.
///
/// Sealed: the set is [`DType::ALL`]. `bytemuck::Pod` guarantees that any bit
/// pattern is a valid value, so buffers can be copied byte-wise to and from
/// the device.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a cubie-mem element type",
    label = "unsupported element type",
    note = "supported element types: f32, f64, i32, u8, u32, i64, u64"
)]
pub trait Element:
    bytemuck::Pod + Send + Sync + fmt::Debug + PartialEq + 'static + sealed::Sealed
{
    /// The runtime tag of this type.
    const DTYPE: DType;
}

/// The floating-point element types (f32, f64), for solver structs generic
/// over their precision.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a floating-point precision",
    label = "not f32 or f64",
    note = "the precisions are f32 and f64"
)]
pub trait Precision: Element + PartialOrd {
    /// Converts from `f64`, rounding to the nearest representable value.
    fn from_f64(value: f64) -> Self;
    /// Widens to `f64`.
    fn to_f64(self) -> f64;
}

macro_rules! element {
    ($($t:ty => $tag:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$tag;
        }
    )*};
}

element!(f32 => F32, f64 => F64, i32 => I32, u8 => U8, u32 => U32, i64 => I64, u64 => U64);

impl Precision for f32 {
    fn from_f64(value: f64) -> Self {
        value as f32
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}

impl Precision for f64 {
    fn from_f64(value: f64) -> Self {
        value
    }
    fn to_f64(self) -> f64 {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_rust_types() {
        assert_eq!(f32::DTYPE.size_bytes(), size_of::<f32>());
        assert_eq!(f64::DTYPE.size_bytes(), size_of::<f64>());
        assert_eq!(i32::DTYPE.size_bytes(), size_of::<i32>());
        assert_eq!(u8::DTYPE.size_bytes(), size_of::<u8>());
        assert_eq!(u32::DTYPE.size_bytes(), size_of::<u32>());
        assert_eq!(i64::DTYPE.size_bytes(), size_of::<i64>());
        assert_eq!(u64::DTYPE.size_bytes(), size_of::<u64>());
    }

    #[test]
    fn names_are_rust_names() {
        let names: Vec<_> = DType::ALL.iter().map(|d| d.to_string()).collect();
        assert_eq!(names, ["f32", "f64", "i32", "u8", "u32", "i64", "u64"]);
    }
}
