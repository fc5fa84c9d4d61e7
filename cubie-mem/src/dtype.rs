//! Element types: the runtime tag of what a buffer holds ([`DType`]) and the
//! Rust types a typed handle may hold ([`Element`]).
//!
//! The guide page [element types](crate::guide::element_types) has the rules.
//! Every read of `T::DTYPE` goes through [`dtype_of`], which checks it.

use std::fmt;

/// The runtime tag of an element type: its name, size and alignment.
/// Every [`ArrayRequest`](crate::ArrayRequest) carries one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
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
    /// 16-bit IEEE half-precision float (`half::f16`, feature `half`).
    F16,
    /// 16-bit brain float (`half::bf16`, feature `half`).
    BF16,
    /// Complex `f32`, real part first (feature `num-complex`).
    ComplexF32,
    /// Complex `f64`, real part first (feature `num-complex`).
    ComplexF64,
    /// A user's own plain-old-data type, made only by [`DType::of`].
    #[non_exhaustive]
    Custom {
        /// The name the type was described with (in errors and `Display`).
        name: &'static str,
        /// `size_of` the type, in bytes (at least 1).
        size: usize,
        /// `align_of` the type, in bytes (at most [`DType::MAX_ALIGN`]).
        align: usize,
    },
}

impl DType {
    /// Every built-in element type, in declaration order.
    pub const ALL: [DType; 11] = [
        DType::F32,
        DType::F64,
        DType::I32,
        DType::U8,
        DType::U32,
        DType::I64,
        DType::U64,
        DType::F16,
        DType::BF16,
        DType::ComplexF32,
        DType::ComplexF64,
    ];

    /// The largest alignment an element type may have, in bytes: that of
    /// host blocks.
    pub const MAX_ALIGN: usize = 64;

    /// The tag of a user's own plain-old-data type `T`, named `name`.
    /// A zero-sized `T`, or one aligned above [`DType::MAX_ALIGN`], fails to
    /// build. Examples are on the guide page
    /// [element types](crate::guide::element_types).
    pub const fn of<T: bytemuck::Pod>(name: &'static str) -> DType {
        const {
            assert!(
                size_of::<T>() > 0,
                "cubie-mem: an element type cannot be zero-sized"
            );
            assert!(
                align_of::<T>() <= DType::MAX_ALIGN,
                "cubie-mem: an element type may be aligned to at most 64 bytes (host memory \
                 blocks are 64-byte aligned): lower its #[repr(align(..))]"
            );
        }
        DType::Custom {
            name,
            size: size_of::<T>(),
            align: align_of::<T>(),
        }
    }

    /// Size of one element in bytes.
    pub const fn size_bytes(self) -> usize {
        match self {
            DType::U8 => size_of::<u8>(),
            DType::F16 | DType::BF16 => size_of::<u16>(),
            DType::F32 | DType::I32 | DType::U32 => size_of::<u32>(),
            DType::F64 | DType::I64 | DType::U64 => size_of::<u64>(),
            DType::ComplexF32 => 2 * size_of::<f32>(),
            DType::ComplexF64 => 2 * size_of::<f64>(),
            DType::Custom { size, .. } => size,
        }
    }

    /// Alignment of one element in bytes, that of the Rust type on this target.
    pub const fn align_bytes(self) -> usize {
        match self {
            DType::U8 => align_of::<u8>(),
            DType::F16 | DType::BF16 => align_of::<u16>(),
            DType::F32 | DType::ComplexF32 => align_of::<f32>(),
            DType::I32 => align_of::<i32>(),
            DType::U32 => align_of::<u32>(),
            DType::F64 | DType::ComplexF64 => align_of::<f64>(),
            DType::I64 => align_of::<i64>(),
            DType::U64 => align_of::<u64>(),
            DType::Custom { align, .. } => align,
        }
    }

    /// The Rust name (`"f32"`, `"Complex<f64>"`), or a custom type's name.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::U8 => "u8",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::U64 => "u64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::ComplexF32 => "Complex<f32>",
            DType::ComplexF64 => "Complex<f64>",
            DType::Custom { name, .. } => name,
        }
    }
}

// Host blocks hold any element type's values at any element offset.
const _: () = assert!(DType::MAX_ALIGN <= crate::block::BLOCK_ALIGNMENT);

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A type a device or pinned buffer may hold: a built-in scalar, or your own
/// `#[repr(C)]` `bytemuck::Pod` struct tagged by [`DType::of`].
///
/// `DTYPE` must describe `Self`, or the crate's uses fail to build.
/// See the guide page [element types](crate::guide::element_types).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a cubie-mem element type",
    label = "unsupported element type",
    note = "element types: f32, f64, i32, u8, u32, i64, u64; half::f16 and half::bf16 with \
            feature `half`; num_complex::Complex<f32> and Complex<f64> with feature `num-complex`",
    note = "a #[repr(C)] struct of your own deriving bytemuck::Pod opts in with `impl \
            cubie_mem::Element for MyType {{ const DTYPE: cubie_mem::DType = \
            cubie_mem::DType::of::<Self>(\"MyType\"); }}`"
)]
pub trait Element: bytemuck::Pod + Send + Sync + fmt::Debug + PartialEq + 'static {
    /// The runtime tag of this type: a built-in tag, or
    /// `DType::of::<Self>("Name")` for a type of your own.
    const DTYPE: DType;
}

/// `T::DTYPE`, checked at compile time against `T`'s size and alignment.
/// The crate reads `T::DTYPE` through this only.
pub(crate) const fn dtype_of<T: Element>() -> DType {
    const {
        assert!(
            T::DTYPE.size_bytes() == size_of::<T>() && T::DTYPE.align_bytes() == align_of::<T>(),
            "cubie-mem: `Element::DTYPE` does not describe the type (its size or alignment \
             differs): write `const DTYPE: DType = DType::of::<Self>(\"Name\");`"
        );
        T::DTYPE
    }
}

mod sealed {
    /// Keeps [`Precision`](super::Precision) to `f32` and `f64`.
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// The floating-point element types (f32, f64), for code generic over its
/// precision. Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a floating-point precision",
    label = "not f32 or f64",
    note = "the precisions are f32 and f64"
)]
pub trait Precision: Element + PartialOrd + sealed::Sealed {
    /// Converts from `f64`, rounding to the nearest representable value.
    fn from_f64(value: f64) -> Self;
    /// Widens to `f64`.
    fn to_f64(self) -> f64;
}

macro_rules! element {
    ($($t:ty => $tag:ident),* $(,)?) => {$(
        impl Element for $t {
            const DTYPE: DType = DType::$tag;
        }
    )*};
}

element!(f32 => F32, f64 => F64, i32 => I32, u8 => U8, u32 => U32, i64 => I64, u64 => U64);

#[cfg(feature = "half")]
element!(half::f16 => F16, half::bf16 => BF16);

#[cfg(feature = "num-complex")]
element!(num_complex::Complex<f32> => ComplexF32, num_complex::Complex<f64> => ComplexF64);

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

    /// Size, alignment and tag of `T` as the crate reads them.
    fn layout<T: Element>() -> (usize, usize, DType) {
        let dtype = dtype_of::<T>();
        assert_eq!(dtype.size_bytes(), size_of::<T>(), "{dtype}");
        assert_eq!(dtype.align_bytes(), align_of::<T>(), "{dtype}");
        (dtype.size_bytes(), dtype.align_bytes(), dtype)
    }

    #[test]
    fn sizes_and_alignments_match_rust_types() {
        assert_eq!(layout::<f32>(), (4, 4, DType::F32));
        assert_eq!(layout::<f64>().2, DType::F64);
        assert_eq!(layout::<i32>(), (4, 4, DType::I32));
        assert_eq!(layout::<u8>(), (1, 1, DType::U8));
        assert_eq!(layout::<u32>(), (4, 4, DType::U32));
        assert_eq!(layout::<i64>().2, DType::I64);
        assert_eq!(layout::<u64>().2, DType::U64);
    }

    #[cfg(feature = "half")]
    #[test]
    fn half_types_are_elements() {
        assert_eq!(layout::<half::f16>(), (2, 2, DType::F16));
        assert_eq!(layout::<half::bf16>(), (2, 2, DType::BF16));
    }

    #[cfg(feature = "num-complex")]
    #[test]
    fn complex_types_are_elements() {
        use num_complex::Complex;
        assert_eq!(layout::<Complex<f32>>(), (8, 4, DType::ComplexF32));
        assert_eq!(layout::<Complex<f64>>().2, DType::ComplexF64);
        assert_eq!(DType::ComplexF64.size_bytes(), 16);
    }

    #[test]
    fn names_are_rust_names() {
        let names: Vec<_> = DType::ALL.iter().map(|d| d.to_string()).collect();
        assert_eq!(
            names,
            [
                "f32",
                "f64",
                "i32",
                "u8",
                "u32",
                "i64",
                "u64",
                "f16",
                "bf16",
                "Complex<f32>",
                "Complex<f64>"
            ]
        );
    }

    #[test]
    fn built_in_alignments_divide_sizes_and_fit_host_blocks() {
        for dtype in DType::ALL {
            let (size, align) = (dtype.size_bytes(), dtype.align_bytes());
            assert!(align.is_power_of_two() && size % align == 0, "{dtype}");
            assert!(align <= DType::MAX_ALIGN, "{dtype}");
        }
    }

    /// A state of three fields per run, 8-byte aligned.
    #[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
    #[repr(C)]
    struct State {
        y: f64,
        t: f64,
        steps: u64,
    }

    impl Element for State {
        const DTYPE: DType = DType::of::<Self>("State");
    }

    /// Cache-line aligned: the largest alignment allowed.
    #[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
    #[repr(C, align(64))]
    struct Line {
        values: [f32; 16],
    }

    impl Element for Line {
        const DTYPE: DType = DType::of::<Self>("Line");
    }

    #[test]
    fn a_custom_type_is_described_by_its_layout() {
        assert_eq!(layout::<State>(), (24, align_of::<f64>(), State::DTYPE));
        assert_eq!(
            State::DTYPE,
            DType::Custom {
                name: "State",
                size: 24,
                align: align_of::<f64>()
            }
        );
        assert_eq!(State::DTYPE.to_string(), "State");
        assert_eq!(layout::<Line>(), (64, 64, Line::DTYPE));
    }

    #[test]
    fn custom_tags_compare_by_name_size_and_alignment() {
        let a = DType::of::<[f64; 3]>("State");
        assert_eq!(a, State::DTYPE, "same name and layout: one element type");
        assert_ne!(DType::of::<[f64; 3]>("Other"), State::DTYPE);
        assert_ne!(DType::of::<[f32; 6]>("State"), State::DTYPE, "alignment 4");
        assert_ne!(
            DType::of::<u64>("u64"),
            DType::U64,
            "a custom tag is never built in"
        );
        let mut tags = vec![State::DTYPE, DType::F64, Line::DTYPE, DType::U8];
        tags.sort();
        assert_eq!(tags, [DType::F64, DType::U8, Line::DTYPE, State::DTYPE]);
    }

    #[test]
    fn precision_is_the_floating_subset() {
        fn round_trip<P: Precision>(x: f64) -> f64 {
            P::from_f64(x).to_f64()
        }
        assert_eq!(round_trip::<f64>(0.1), 0.1);
        assert_eq!(round_trip::<f32>(0.5), 0.5);
        assert_ne!(round_trip::<f32>(0.1), 0.1);
    }
}
