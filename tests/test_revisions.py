"""perfbench.revisions: which ops one process can measure for two headers (per-op interface), and
revision names that are not commits."""

from __future__ import annotations

import pytest

from perfbench import ops, revisions
from perfbench.errors import UsageError
from tests.conftest import ROOT

HEADER = (ROOT / "native" / "include" / "perfbench.h").read_text()
OPS = ["Softmax", "RotaryEmbedding", "GroupQueryAttention", "MultiHeadAttention"]


def test_identical_headers_are_compatible_for_every_op():
    assert revisions.compatibility(HEADER, HEADER, OPS) == {op: None for op in OPS}
    iface = revisions.interface(HEADER)
    assert {"softmax", "rotary_embedding", "group_query_attention", "multi_head_attention"} <= set(iface.entries)
    assert {"softmax", "binary", "layer_norm", "gelu"} <= set(iface.structs)
    assert "pb_time_warm" in iface.common and "pb_softmax_args" not in iface.common


def test_every_registered_op_is_comparable_with_itself():
    # Op.kernel is the only mapping from op to kernel: the names derived from op names
    # (FastGelu -> fast_gelu, ScatterND -> scatter_n_d) made 8 of 22 ops "only in head"
    names = sorted(ops.REGISTRY)
    assert revisions.lacking(HEADER, HEADER, names) == {}
    assert revisions.compatibility(HEADER, HEADER, names) == {op: None for op in names}


def test_comments_and_spacing_do_not_matter_but_a_field_does():
    reformatted = HEADER.replace("    int64_t rows;\n", "    int64_t   rows;   /* rows of x */\n", 1)
    assert revisions.compatibility(HEADER, reformatted, OPS)["Softmax"] is None
    changed = HEADER.replace("    void *y;\n} pb_softmax_args;", "    void *y;\n    int32_t flags;\n} pb_softmax_args;")
    got = revisions.compatibility(HEADER, changed, OPS)
    assert "pb_softmax_args or pb_softmax() changed" in got["Softmax"]
    assert got["RotaryEmbedding"] is None  # only the op whose declarations changed


def test_a_shared_declaration_change_affects_every_op():
    changed = HEADER.replace("int pb_pool_quiesce(void);", "int pb_pool_quiesce(int32_t timeout_us);")
    got = revisions.compatibility(HEADER, changed, OPS)
    assert all("shared declarations changed" in why for why in got.values())


def test_an_op_one_side_lacks_is_named():
    start = HEADER.index("typedef struct pb_softmax_args")
    end = HEADER.index("int pb_softmax(const void *args);") + len("int pb_softmax(const void *args);")
    without = HEADER[:start] + HEADER[end:]
    assert revisions.compatibility(without, HEADER, ["Softmax"])["Softmax"] == "base's header declares no pb_softmax"
    assert revisions.compatibility(HEADER, without, ["Softmax"])["Softmax"] == "head's header declares no pb_softmax"
    assert revisions.lacking(without, HEADER, OPS) == {"Softmax": "base"}
    assert revisions.lacking(HEADER, without, OPS) == {"Softmax": "head"}
    assert revisions.lacking(HEADER, HEADER, OPS) == {}


def test_kernel_names_come_from_the_op_files():
    assert revisions.kernel_of("GroupQueryAttention") == ("group_query_attention", "group_query_attention")
    assert revisions.kernel_of("FastGelu") == ("gelu", "gelu")
    assert revisions.kernel_of("SkipLayerNormalization") == ("layer_norm", "layer_norm")
    assert revisions.kernel_of("Add") == ("add", "binary")
    assert revisions.kernel_of("QuickGelu") == ("sigmoid", "sigmoid")
    for name, op in ops.REGISTRY.items():
        assert revisions.kernel_of(name)[0] == op.kernel


def test_a_shared_args_struct_change_affects_the_ops_that_use_it():
    changed = HEADER.replace("} pb_binary_args;", "    int32_t flags;\n} pb_binary_args;")
    assert changed != HEADER
    got = revisions.compatibility(HEADER, changed, ["Add", "Mul", "Softmax", "Gelu"])
    assert got["Add"] == "pb_binary_args or pb_add() changed between base and head"
    assert got["Mul"] == "pb_binary_args or pb_mul() changed between base and head"
    assert got["Softmax"] is None and got["Gelu"] is None
    gone = HEADER.replace("int pb_mul(const void *args);", "")
    assert revisions.lacking(HEADER, gone, ["Add", "Mul"]) == {"Mul": "head"}
    assert revisions.compatibility(gone, HEADER, ["Mul"])["Mul"] == "base's header declares no pb_mul (args pb_binary_args)"


def test_ops_sharing_a_kernel_are_compatible_and_follow_its_declarations():
    shared = ["Sigmoid", "QuickGelu", "Gelu", "FastGelu", "BiasGelu", "SkipLayerNormalization"]
    assert revisions.compatibility(HEADER, HEADER, shared) == {op: None for op in shared}
    assert revisions.lacking(HEADER, HEADER, shared) == {}
    changed = HEADER.replace("    float alpha;", "    double alpha;", 1)
    assert changed != HEADER
    got = revisions.compatibility(HEADER, changed, shared)
    assert "pb_sigmoid_args or pb_sigmoid() changed" in got["QuickGelu"] and got["Sigmoid"] == got["QuickGelu"]
    assert got["Gelu"] is None and got["FastGelu"] is None


@pytest.mark.parametrize("rev", ["no-such-branch", "--output=/tmp/x", "", "HEAD~100000"])
def test_revisions_that_are_not_commits_are_refused(rev):
    with pytest.raises(UsageError):
        revisions.resolve(ROOT, rev)


def test_a_revision_resolves_to_its_sha():
    sha = revisions.resolve(ROOT, "HEAD")
    assert len(sha) == 40 and revisions.resolve(ROOT, sha[:12]) == sha


def test_a_new_kernel_with_its_constants_leaves_every_other_op_comparable():
    # the header before an op was added: pb_sigmoid_args, pb_sigmoid() and PB_SIGMOID_* gone
    start = HEADER.index("#define PB_SIGMOID_PLAIN")
    end = HEADER.index("int pb_sigmoid(const void *args);") + len("int pb_sigmoid(const void *args);")
    before = HEADER[:start] + HEADER[end:]
    others = sorted(set(ops.REGISTRY) - {"Sigmoid", "QuickGelu"})
    assert revisions.compatibility(before, HEADER, others) == {op: None for op in others}
    assert revisions.lacking(before, HEADER, ["Sigmoid", "QuickGelu", "Gelu"]) == {"Sigmoid": "base", "QuickGelu": "base"}
    # a kernel's own constant changing is that kernel's change only
    changed = HEADER.replace("#define PB_GELU_TANH 1", "#define PB_GELU_TANH 2")
    got = revisions.compatibility(HEADER, changed, ["Gelu", "FastGelu", "Sigmoid"])
    assert "pb_gelu_args or pb_gelu() changed" in got["Gelu"] and got["Sigmoid"] is None
    # a constant no kernel owns is shared
    shared = HEADER.replace("#define PB_DTYPE_F16 10", "#define PB_DTYPE_F16 11")
    assert all("shared declarations" in why for why in revisions.compatibility(HEADER, shared, others).values())


def test_a_head_that_only_adds_shared_prototypes_stays_comparable():
    # b0b89e6 added pb_clear_error and pb_pool_multi_regions: a PR adding a shared function
    # must not send every op to the per-checkout mode; removing or changing one must
    before = HEADER.replace("int64_t pb_pool_multi_regions(void);", "").replace("void pb_clear_error(void);", "")
    assert before != HEADER
    names = sorted(ops.REGISTRY)
    assert revisions.compatibility(before, HEADER, names) == {op: None for op in names}
    got = revisions.compatibility(HEADER, before, ["Softmax"])  # head removes them
    assert "shared declarations changed" in got["Softmax"]
    typedef = HEADER.replace("int pb_pool_quiesce(void);", "int pb_pool_quiesce(void);\ntypedef struct pb_x { int a; } pb_x;")
    assert "shared declarations changed" in revisions.compatibility(HEADER, typedef, ["Softmax"])["Softmax"]
