"""The layer path parsing of pipeline/link/collective_links.sql, exactly: the layer number,
the path cut after its layer, the kind and the short label, for every real naming."""

from __future__ import annotations

import duckdb
import pytest

from pipeline.link.plan import plan

MEGATRON = "DistributedDataParallel_0/Float16Module_0/GPTModel_0/TransformerBlock_0"


def _connection() -> duckdb.DuckDBPyConnection:
    """A connection with the macros of collective_links.sql and a collectives table."""
    (sql,) = [f for f in plan().files if f.name == "collective_links.sql"]
    con = duckdb.connect()
    for statement in duckdb.extract_statements(sql.text):
        code = [ln for ln in statement.query.splitlines() if not ln.lstrip().startswith("--")]
        if "\n".join(code).lstrip().startswith("CREATE MACRO"):
            con.execute(statement)
    con.execute("CREATE TABLE collectives (job VARCHAR, layer VARCHAR, attributed_by VARCHAR)")
    return con


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    return _connection()


@pytest.mark.parametrize(
    ("path", "index", "cut"),
    [
        # Megatron: TransformerLayer_N nested in TransformerBlock_0
        (f"{MEGATRON}/TransformerLayer_1/ParallelAttention_1/RowParallelLinear_2", 1,
         f"{MEGATRON}/TransformerLayer_1"),
        (f"{MEGATRON}/TransformerLayer_0", 0, f"{MEGATRON}/TransformerLayer_0"),
        (f"{MEGATRON}/LayerNorm_4", 0, MEGATRON),
        # Hugging Face, torchtitan and Megatron attribute names
        ("model.layers.12.self_attn.o_proj", 12, "model.layers.12"),
        ("layers.3", 3, "layers.3"),
        ("decoder.layers.7.mlp", 7, "decoder.layers.7"),
        ("transformer.h.5.attn", 5, "transformer.h.5"),
        # wrappers: FSDP1, torch.compile, DDP's module.
        ("_fsdp_wrapped_module.layers.3._fsdp_wrapped_module.attention", 3,
         "_fsdp_wrapped_module.layers.3"),
        ("_orig_mod.layers.2.feed_forward", 2, "_orig_mod.layers.2"),
        ("module.blocks.4", 4, "module.blocks.4"),
        # profiler class-name paths
        ("TinyGPT_0/Block_1/Attention_1", 1, "TinyGPT_0/Block_1"),
        ("LlamaForCausalLM_0/LlamaModel_0/LlamaDecoderLayer_11/LlamaMLP_11", 11,
         "LlamaForCausalLM_0/LlamaModel_0/LlamaDecoderLayer_11"),
        ("GPT2Model_0/h_3/mlp", 3, "GPT2Model_0/h_3"),
        # no layer: a norm, an embedding, an expert list, a head
        ("TinyGPT_0/LayerNorm_0", None, "TinyGPT_0/LayerNorm_0"),
        ("model.embed_tokens", None, "model.embed_tokens"),
        ("experts.3", None, "experts.3"),
        ("output_layer", None, "output_layer"),
    ],
)  # fmt: skip
def test_layer_index_and_path(con, path: str, index: int | None, cut: str) -> None:
    got = con.execute("SELECT _layer_index(?), _layer_path(?)", [path, path]).fetchone()
    assert got == (index, cut)


def test_labels_are_the_shortest_tail_that_tells_layers_apart(con) -> None:
    paths = [
        f"{MEGATRON}/TransformerLayer_0/ParallelAttention_0/RowParallelLinear_0",
        f"{MEGATRON}/TransformerLayer_0/ParallelMLP_0/RowParallelLinear_1",
        f"{MEGATRON}/TransformerLayer_1/ParallelAttention_1/RowParallelLinear_2",
        f"{MEGATRON}/TransformerLayer_1",
        "DistributedDataParallel_0/Float16Module_0/GPTModel_0/LanguageModelEmbedding_0",
        "_fsdp_wrapped_module.layers.3._fsdp_wrapped_module.attention",
        "optimizer",
    ]
    con.execute("DELETE FROM collectives")
    con.executemany("INSERT INTO collectives VALUES ('j', ?, 'module_scope')", [[p] for p in paths])
    con.execute("INSERT INTO collectives VALUES ('other', 'A_0/Block_0/Attention_0', 'x')")
    (sql,) = [f for f in plan().files if f.name == "collective_links.sql"]
    (names,) = [
        s.query for s in duckdb.extract_statements(sql.text) if "TABLE _layer_names" in s.query
    ]
    con.execute(names)
    got = dict(
        con.execute("SELECT layer, layer_label FROM _layer_names WHERE job = 'j'").fetchall()
    )
    assert got == {
        paths[0]: "TransformerLayer_0/ParallelAttention_0/RowParallelLinear_0",
        paths[1]: "TransformerLayer_0/ParallelMLP_0/RowParallelLinear_1",
        paths[2]: "TransformerLayer_1/ParallelAttention_1/RowParallelLinear_2",
        paths[3]: "TransformerLayer_1",
        paths[4]: "LanguageModelEmbedding_0",
        # (the wrappers dropped; one '/'-component holds the whole dotted name)
        paths[5]: "layers.3.attention",
        "optimizer": "optimizer",
    }
    # a job's labels are its own: another job's paths do not lengthen them
    other = con.execute("SELECT layer_label FROM _layer_names WHERE job = 'other'").fetchall()
    assert other == [("Block_0/Attention_0",)]


def test_a_send_recv_layer_is_cut_after_its_layer(con) -> None:
    con.execute("DELETE FROM collectives")
    con.execute("INSERT INTO collectives VALUES ('j', 'M_0/Block_2/LayerNorm_0', 'pp_boundary')")
    (sql,) = [f for f in plan().files if f.name == "collective_links.sql"]
    (names,) = [
        s.query for s in duckdb.extract_statements(sql.text) if "TABLE _layer_names" in s.query
    ]
    con.execute(names.replace("CREATE TEMP TABLE", "CREATE OR REPLACE TEMP TABLE"))
    got = con.execute("SELECT layer, layer_index, layer_label FROM _layer_names").fetchall()
    assert got == [("M_0/Block_2", 2, "Block_2")]
