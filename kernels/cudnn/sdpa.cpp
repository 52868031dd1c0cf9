// cuDNN's fused attention (flash SDPA), forward and backward, for the
// attention op (kernels/src/attention/cudnn.rs), over NVIDIA's cudnn-frontend
// (header-only). Built by kernels/build.rs with feature `cudnn` and
// NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING: nothing links at build time;
// fg_cudnn_open() dlopen()s the libcudnn.so.9 the Rust side found and the
// frontend resolves every cuDNN entry point from it.
//
// One call: `slots` sequences (ragged offsets and lengths, see
// kernels/src/attention/cudnn_map.rs), causal bottom-right, padding mask
// from the lengths, GQA by K/V with fewer heads, the deterministic
// backward unless the key says otherwise. Operands are token-major (THD:
// head stride d, token stride heads * d), lengths INT32, ragged offsets
// INT64 with entry n the past-the-end of the data, every int array 16-byte
// aligned in one buffer (`starts`). The forward's implementation is pinned
// to COMPOSITE (the path the first GPU run verifies, not the UNIFIED one
// cuDNN >= 9.21 would pick), plans from heuristics A then FALLBACK, the SM
// version set from the key (not read through cudart). Graphs are built
// once per FgSdpaKey (every field, bucketed lengths included) and cached,
// as llm.c's llmc/cudnn_att.cpp does.
// Every entry point returns 0, or non-zero with a message in `err`; none
// throws or exits.

#include <cudnn_frontend.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace cudnn_frontend {
// The frontend reads every cuDNN symbol from this handle (dynamic loading).
void *cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace fe = cudnn_frontend;

extern "C" {

// Mirrors kernels/src/attention/cudnn_map.rs `GraphKey` (#[repr(C)]).
struct FgSdpaKey {
    int32_t backward;
    int32_t io;  // 0 bf16, 1 f16
    int64_t slots, heads, kv_heads, head_dim, max_q, max_kv;
    int64_t strides[12];  // head, token strides of q, k, v, o, dq, dkv
    uint32_t scale_bits;
    int32_t deterministic;
    int32_t sm_version;  // 90 for compute capability 9.0; 0: let the frontend read it
    int32_t reserved;
};

// Device pointers of one call (mirrors `Pointers` in cudnn.rs). `ints` holds
// seq_q, seq_kv (slots each, int32), then the ragged offsets of q, k, v, o,
// dq, dkv (slots + 1 each, int64), each starting `starts[i]` bytes in
// (multiples of 16: cudnn_map.rs `Ragged::packed`).
struct FgSdpaPtrs {
    void *q, *k, *v, *o, *stats, *d_o, *dq, *dk, *dv;
    char *ints;
    uint64_t starts[8];
    void *workspace;
};
}

static_assert(sizeof(FgSdpaKey) == 168, "FgSdpaKey mirrors GraphKey in cudnn_map.rs (no padding)");
static_assert(sizeof(FgSdpaPtrs) == 152, "FgSdpaPtrs mirrors Pointers in cudnn.rs");

namespace {

enum Uid : int64_t { Q = 1, K, V, O, STATS, DO, DQ, DK, DV, SEQ_Q, SEQ_KV, OFF_Q, OFF_K, OFF_V, OFF_O, OFF_DQ, OFF_DKV };

std::mutex mutex;
std::map<int, cudnnHandle_t> handles;  // per device ordinal
std::map<std::string, std::shared_ptr<fe::graph::Graph>> graphs;

void set_err(char *err, size_t n, const std::string &msg) {
    if (err && n) {
        std::snprintf(err, n, "%s", msg.c_str());
    }
}

std::string key_bytes(const FgSdpaKey &k) {
    return std::string(reinterpret_cast<const char *>(&k), sizeof k);
}

using T = std::shared_ptr<fe::graph::Tensor_attributes>;

// A [n, heads, len, d] operand with its own head and token strides and
// ragged offsets; the row stride is not read (the offsets place each sequence).
T operand(fe::graph::Graph &g, const char *name, int64_t uid, int64_t n, int64_t heads, int64_t len, int64_t d,
          const int64_t *hs, T ragged) {
    auto a = fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({n, heads, len, d});
    a.set_stride({heads * len * d, hs[0], hs[1], 1}).set_ragged_offset(ragged);
    return g.tensor(a);
}

T ints(fe::graph::Graph &g, const char *name, int64_t uid, int64_t n, fe::DataType_t type) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({n, 1, 1, 1})
                        .set_stride({1, 1, 1, 1})
                        .set_data_type(type));
}

std::string check(fe::error_object e, const char *step) {
    return e.is_good() ? std::string() : std::string(step) + ": " + e.get_message();
}

// Builds the graph of `k` (validate, operation graph, heuristics A then
// FALLBACK, support check, plans); "" or why it failed.
std::string build(const FgSdpaKey &k, cudnnHandle_t handle, std::shared_ptr<fe::graph::Graph> &out) {
    auto g = std::make_shared<fe::graph::Graph>();
    auto io = k.io == 1 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16;
    g->set_io_data_type(io).set_intermediate_data_type(fe::DataType_t::FLOAT).set_compute_data_type(fe::DataType_t::FLOAT);
    if (k.sm_version > 0) g->set_sm_version(k.sm_version);
    const int64_t n = k.slots, h = k.heads, hk = k.kv_heads, d = k.head_dim, sq = k.max_q, sk = k.max_kv;
    float scale;
    std::memcpy(&scale, &k.scale_bits, sizeof scale);
    auto seq_q = ints(*g, "seq_q", SEQ_Q, n, fe::DataType_t::INT32), seq_kv = ints(*g, "seq_kv", SEQ_KV, n, fe::DataType_t::INT32);
    auto off = [&](const char *name, int64_t uid) { return ints(*g, name, uid, n + 1, fe::DataType_t::INT64); };
    auto off_q = off("off_q", OFF_Q), off_k = off("off_k", OFF_K), off_v = off("off_v", OFF_V), off_o = off("off_o", OFF_O);
    auto q = operand(*g, "Q", Q, n, h, sq, d, k.strides + 0, off_q);
    auto kk = operand(*g, "K", K, n, hk, sk, d, k.strides + 2, off_k);
    auto v = operand(*g, "V", V, n, hk, sk, d, k.strides + 4, off_v);
    if (!k.backward) {
        auto opt = fe::graph::SDPA_attributes()
                       .set_name("fusegrpo_sdpa")
                       .set_generate_stats(true)
                       .set_attn_scale(scale)
                       .set_causal_mask_bottom_right(true)
                       .set_padding_mask(true)
                       .set_seq_len_q(seq_q)
                       .set_seq_len_kv(seq_kv)
                       .set_implementation(fe::AttentionImplementation_t::COMPOSITE);
        auto [o, stats] = g->sdpa(q, kk, v, opt);
        o->set_output(true).set_uid(O).set_dim({n, h, sq, d}).set_stride({h * sq * d, k.strides[6], k.strides[7], 1});
        o->set_ragged_offset(off_o);
        stats->set_output(true).set_uid(STATS).set_data_type(fe::DataType_t::FLOAT);
        stats->set_dim({n, h, sq, 1}).set_stride({h * sq, sq, 1, 1});
    } else {
        auto o = operand(*g, "O", O, n, h, sq, d, k.strides + 6, off_o);
        auto d_o = operand(*g, "dO", DO, n, h, sq, d, k.strides + 6, off_o);
        auto stats = g->tensor(fe::graph::Tensor_attributes()
                                   .set_name("stats")
                                   .set_uid(STATS)
                                   .set_dim({n, h, sq, 1})
                                   .set_stride({h * sq, sq, 1, 1})
                                   .set_data_type(fe::DataType_t::FLOAT));
        auto opt = fe::graph::SDPA_backward_attributes()
                       .set_name("fusegrpo_sdpa_backward")
                       .set_attn_scale(scale)
                       .set_causal_mask_bottom_right(true)
                       .set_padding_mask(true)
                       .set_seq_len_q(seq_q)
                       .set_seq_len_kv(seq_kv)
                       .set_deterministic_algorithm(k.deterministic != 0);
        auto [dq, dk, dv] = g->sdpa_backward(q, kk, v, o, d_o, stats, opt);
        auto off_dq = off("off_dq", OFF_DQ), off_dkv = off("off_dkv", OFF_DKV);
        dq->set_output(true).set_uid(DQ).set_dim({n, h, sq, d}).set_stride({h * sq * d, k.strides[8], k.strides[9], 1});
        dq->set_ragged_offset(off_dq);
        dk->set_output(true).set_uid(DK).set_dim({n, hk, sk, d}).set_stride({hk * sk * d, k.strides[10], k.strides[11], 1});
        dk->set_ragged_offset(off_dkv);
        dv->set_output(true).set_uid(DV).set_dim({n, hk, sk, d}).set_stride({hk * sk * d, k.strides[10], k.strides[11], 1});
        dv->set_ragged_offset(off_dkv);
    }
    std::string e;
    if (!(e = check(g->validate(), "validate")).empty()) return e;
    if (!(e = check(g->build_operation_graph(handle), "build_operation_graph")).empty()) return e;
    if (!(e = check(g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "create_execution_plans")).empty()) return e;
    if (!(e = check(g->check_support(handle), "check_support")).empty()) return e;
    if (!(e = check(g->build_plans(handle), "build_plans")).empty()) return e;
    out = g;
    return "";
}

// The cached graph of `k` on device `ordinal`, built on first use.
std::string graph_for(const FgSdpaKey &k, int ordinal, std::shared_ptr<fe::graph::Graph> &out, cudnnHandle_t &handle) {
    if (!fe::cudnn_dlhandle) return "libcudnn is not open (fg_cudnn_open)";
    auto h = handles.find(ordinal);
    if (h == handles.end()) {
        cudnnHandle_t fresh = nullptr;
        auto status = fe::detail::create_handle(&fresh);
        if (status != CUDNN_STATUS_SUCCESS) {
            return std::string("cudnnCreate failed: ") + fe::detail::get_error_string(status);
        }
        h = handles.emplace(ordinal, fresh).first;
    }
    handle = h->second;
    std::string key = key_bytes(k) + std::string(reinterpret_cast<const char *>(&ordinal), sizeof ordinal);
    auto it = graphs.find(key);
    if (it != graphs.end()) {
        out = it->second;
        return "";
    }
    std::string e = build(k, handle, out);
    if (e.empty()) graphs.emplace(key, out);
    return e;
}

}  // namespace

extern "C" {

// dlopen()s libcudnn at `path` (a file or a bare soname) and reads its
// version: > 0 on success, 0 with a message in `err`.
int64_t fg_cudnn_open(const char *path, char *err, size_t n) {
    try {
        std::lock_guard<std::mutex> lock(mutex);
        if (!fe::cudnn_dlhandle) {
            dlerror();
            void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
            if (!h) {
                const char *why = dlerror();
                set_err(err, n, std::string("dlopen ") + path + ": " + (why ? why : "unknown error"));
                return 0;
            }
            fe::cudnn_dlhandle = h;
        }
        return static_cast<int64_t>(fe::detail::get_backend_version());
    } catch (const std::exception &e) {
        set_err(err, n, e.what());
        return 0;
    } catch (...) {
        set_err(err, n, "unknown exception");
        return 0;
    }
}

// Builds (or finds) the graph of `key` on device `ordinal` and writes its
// workspace size in bytes; 0 on success.
int fg_cudnn_prepare(const FgSdpaKey *key, int ordinal, int64_t *workspace, char *err, size_t n) {
    try {
        std::lock_guard<std::mutex> lock(mutex);
        std::shared_ptr<fe::graph::Graph> g;
        cudnnHandle_t handle;
        std::string e = graph_for(*key, ordinal, g, handle);
        if (!e.empty()) {
            set_err(err, n, e);
            return 1;
        }
        *workspace = g->get_workspace_size();
        return 0;
    } catch (const std::exception &e) {
        set_err(err, n, e.what());
        return 1;
    } catch (...) {
        set_err(err, n, "unknown exception");
        return 1;
    }
}

// Runs the graph of `key` (prepared) on `stream` with the pointers of `p`.
int fg_cudnn_execute(const FgSdpaKey *key, int ordinal, const FgSdpaPtrs *p, void *stream, char *err, size_t n) {
    try {
        std::lock_guard<std::mutex> lock(mutex);
        std::shared_ptr<fe::graph::Graph> g;
        cudnnHandle_t handle;
        std::string e = graph_for(*key, ordinal, g, handle);
        if (!e.empty()) {
            set_err(err, n, e);
            return 1;
        }
        auto status = fe::detail::set_stream(handle, static_cast<cudaStream_t>(stream));
        if (status != CUDNN_STATUS_SUCCESS) {
            set_err(err, n, std::string("cudnnSetStream: ") + fe::detail::get_error_string(status));
            return 1;
        }
        auto at = [&](int which) -> void * { return p->ints + p->starts[which]; };
        for (int which = 0; which < 8; ++which) {
            if (p->starts[which] % 16 != 0) {
                set_err(err, n, "int array " + std::to_string(which) + " is not 16-byte aligned");
                return 1;
            }
        }
        std::unordered_map<int64_t, void *> pack = {
            {Q, p->q}, {K, p->k}, {V, p->v}, {O, p->o}, {STATS, p->stats},
            {SEQ_Q, at(0)}, {SEQ_KV, at(1)}, {OFF_Q, at(2)}, {OFF_K, at(3)},
            {OFF_V, at(4)}, {OFF_O, at(5)},
        };
        if (key->backward) {
            pack[DO] = p->d_o;
            pack[DQ] = p->dq;
            pack[DK] = p->dk;
            pack[DV] = p->dv;
            pack[OFF_DQ] = at(6);
            pack[OFF_DKV] = at(7);
        }
        e = check(g->execute(handle, pack, p->workspace), "execute");
        if (!e.empty()) {
            set_err(err, n, e);
            return 1;
        }
        return 0;
    } catch (const std::exception &e) {
        set_err(err, n, e.what());
        return 1;
    } catch (...) {
        set_err(err, n, "unknown exception");
        return 1;
    }
}

// dlopen()s `path` with RTLD_GLOBAL (a library the frontend later opens by
// name, e.g. libcudart); 0 on success.
int fg_dlopen_global(const char *path, char *err, size_t n) {
    dlerror();
    if (!dlopen(path, RTLD_NOW | RTLD_GLOBAL)) {
        const char *why = dlerror();
        set_err(err, n, std::string("dlopen ") + path + ": " + (why ? why : "unknown error"));
        return 1;
    }
    return 0;
}

// Tells the frontend which libcudart to open (CUDNN_FRONTEND_CUDART_LIB_NAME):
// the one the Rust side opened, so that it never finds both .12 and .13.
// Before the first graph build, under the shim's lock; an explicit setting
// in the environment is kept.
void fg_cudnn_set_cudart(const char *name) {
    std::lock_guard<std::mutex> lock(mutex);
    setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", name, 0);
}

// Caps the deterministic backward's dP workspace (CUDNN_FRONTEND_ATTN_DP_WORKSPACE_LIMIT,
// bytes): on Hopper with cuDNN >= 9.25 the frontend (1.32) then serves a
// deterministic backward whose workspace is linear in the sequence instead
// of the quadratic dP one where that would exceed the cap. An explicit
// setting in the environment is kept.
void fg_cudnn_set_dp_limit(int64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex);
    setenv("CUDNN_FRONTEND_ATTN_DP_WORKSPACE_LIMIT", std::to_string(bytes).c_str(), 0);
}

// The number of graphs built so far (for the log and tests on a GPU).
int64_t fg_cudnn_graphs() {
    std::lock_guard<std::mutex> lock(mutex);
    return static_cast<int64_t>(graphs.size());
}
}
