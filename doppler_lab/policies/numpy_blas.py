"""numpy's own single-precision BLAS calls from compiled code, so a compiled kernel computes a
matrix product to the bit as numpy's ``@`` does.

numpy multiplies float32 matrices with the ``cblas_sgemm`` / ``cblas_sgemv`` of the BLAS it was
built with, one call per matrix of a stack; which arguments it passes depends on the operands'
layout (``numpy/_core/src/umath/matmul.c.src``). :func:`stack_matmul` and :func:`stack_matvec`
make the calls numpy makes for the layouts they name, on the same
library, so their results are numpy's to the bit. They exist only where numpy's BLAS is the
scipy-openblas (ILP64) that numpy wheels ship, found among the process's loaded libraries
(Linux): :data:`AVAILABLE` says so; without it a caller keeps numpy.
"""

from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

#: numpy's BLAS symbols (scipy-openblas, 64-bit integers)
SGEMM, SGEMV = "scipy_cblas_sgemm64_", "scipy_cblas_sgemv64_"
_ROW_MAJOR, _COL_MAJOR, _NO_TRANS, _TRANS = 101, 102, 111, 112


def _numpy_blas_path() -> str | None:
    """The file of the scipy-openblas library numpy loaded (None: not found)."""
    try:
        blas = np.__config__.CONFIG["Build Dependencies"]["blas"]
        if blas.get("name") != "scipy-openblas" or "USE64BITINT" not in str(
            blas.get("openblas configuration", "")
        ):
            return None
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if "scipy_openblas64_" in path and path.endswith(".so"):
                    return path
    except (OSError, KeyError, AttributeError, IndexError, TypeError):
        return None
    return None


def _register() -> bool:
    path = _numpy_blas_path()
    if path is None:
        return False
    try:
        lib = ctypes.CDLL(path)
        for name in (SGEMM, SGEMV):
            llvm.add_symbol(name, ctypes.cast(getattr(lib, name), ctypes.c_void_p).value)
    except (OSError, AttributeError):
        return False
    return True


#: numpy's BLAS is callable from compiled code (the kernels below may be used)
AVAILABLE: bool = _register()


def _call_blas(builder, name, parts):  # pragma: no cover - compile time
    """Emit ``name(*parts)``, a void function of the parts' types."""
    fnty = ir.FunctionType(ir.VoidType(), [p.type for p in parts])
    builder.call(cgutils.get_or_insert_function(builder.module, fnty, name), parts)


def _ints(*values):  # pragma: no cover - compile time
    """C ``int`` constants (the CBLAS enums)."""
    return [ir.Constant(ir.IntType(32), v) for v in values]


def _scalars(*values):  # pragma: no cover - compile time
    """``float`` constants (alpha, beta)."""
    return [ir.Constant(ir.FloatType(), v) for v in values]


def _ptr(context, builder, arrty, arr, offset):  # pragma: no cover - compile time
    """``&arr.data[offset]``."""
    return builder.gep(context.make_array(arrty)(context, builder, arr).data, [offset])


@intrinsic
def _sgemm(typingctx, trans_b, m, n, k, a, a_off, b, ldb, c, c_off):  # pragma: no cover
    """``cblas_sgemm(RowMajor, NoTrans, trans_b, m, n, k, 1, a + a_off, k, b, ldb, 0,
    c + c_off, n)``.

    Its parameters are CBLAS's own: the C function it calls.
    """
    i64 = types.int64
    sig = types.void(i64, i64, i64, i64, a, i64, b, i64, c, i64)

    def codegen(context, builder, signature, args):
        tb, m_, n_, k_, a_, ao, b_, ldb_, c_, co = args
        at, bt, ct = signature.args[4], signature.args[6], signature.args[8]
        zero = ir.Constant(ir.IntType(64), 0)
        a_p, b_p = _ptr(context, builder, at, a_, ao), _ptr(context, builder, bt, b_, zero)
        one, nil = _scalars(1.0, 0.0)
        parts = [*_ints(_ROW_MAJOR, _NO_TRANS), builder.trunc(tb, ir.IntType(32)), m_, n_, k_]
        parts += [one, a_p, k_, b_p, ldb_, nil, _ptr(context, builder, ct, c_, co), n_]
        _call_blas(builder, SGEMM, parts)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _sgemv_t(typingctx, m, n, a, a_off, x, y, y_off):  # pragma: no cover
    """``cblas_sgemv(ColMajor, Trans, n, m, 1, a + a_off, n, x, 1, 0, y + y_off, 1)``: the
    ``(m, n)`` row-major matrix times ``x``."""
    i64 = types.int64
    sig = types.void(i64, i64, a, i64, x, y, i64)

    def codegen(context, builder, signature, args):
        m_, n_, a_, ao, x_, y_, yo = args
        at, xt, yt = signature.args[2], signature.args[4], signature.args[5]
        unit, zero = ir.Constant(ir.IntType(64), 1), ir.Constant(ir.IntType(64), 0)
        one, nil = _scalars(1.0, 0.0)
        a_p, x_p = _ptr(context, builder, at, a_, ao), _ptr(context, builder, xt, x_, zero)
        parts = [*_ints(_COL_MAJOR, _TRANS), n_, m_, one, a_p, n_, x_p, unit, nil]
        parts += [_ptr(context, builder, yt, y_, yo), unit]
        _call_blas(builder, SGEMV, parts)
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True)
def stack_matmul(a, w, out, w_transposed=False):  # pragma: no cover - compiled
    """``out[:] = a @ w`` as numpy computes it: ``a`` ``(B, M, K)`` and ``w`` ``(K, N)``
    C-contiguous float32, ``M, K, N >= 2``; with ``w_transposed``, ``out[:] = a @ w.T``
    (``w`` ``(N, K)``: numpy's product with an F-contiguous operand)."""
    nb, m, k = a.shape
    n = w.shape[0] if w_transposed else w.shape[1]
    trans, ldb = (_TRANS, k) if w_transposed else (_NO_TRANS, n)
    for b in range(nb):
        _sgemm(trans, m, n, k, a, b * m * k, w, ldb, out, b * m * n)


@njit(cache=True)
def stack_matvec(a, x, out):  # pragma: no cover - compiled
    """``out[:] = a @ x`` as numpy computes it: ``a`` ``(B, M, K)`` C-contiguous and ``x``
    ``(K,)`` contiguous float32, ``M, K >= 2``."""
    nb, m, k = a.shape
    for b in range(nb):
        _sgemv_t(m, k, a, b * m * k, x, out, b * m)
