"""Python ports of coli's float conversions, bit for bit (standard library only).

Shared by make_reference_models.py (which cross-checks torch's f32 -> f16
against them) and check_reference_fixtures.py (which re-quantises probe rows).
"""
import math
import struct


def f32(x):
    """x rounded to float32, as a Python float."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def float_to_half(value):
    """coli::kernels::float_to_half for a non-negative finite float32 value: the IEEE half bits."""
    magnitude = abs(value)
    if magnitude >= 65520.0:
        return 0x7C00
    if magnitude < 2.0**-14:
        return int(round(math.ldexp(magnitude, 24)))
    fraction, exponent = math.frexp(magnitude)
    mantissa = int(round(math.ldexp(fraction, 11)))  # Python round(): half to even
    if mantissa == 2048:
        mantissa, exponent = 1024, exponent + 1
    biased = exponent - 1 + 15
    if biased >= 31:
        return 0x7C00
    return (biased << 10) | (mantissa & 0x3FF)


def half_to_float(bits):
    return struct.unpack("<e", struct.pack("<H", bits))[0]
