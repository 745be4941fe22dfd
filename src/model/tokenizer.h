/*
 * tokenizer.h - text <-> token ids for the two vocabulary kinds found in
 * GGUF files, reproducing llama.cpp's results:
 *
 *  - SentencePiece-style ("llama"): a space is prepended to each text
 *    segment, spaces become U+2581 "▁", then adjacent pieces are merged,
 *    best vocabulary score first (leftmost on ties); a character with no
 *    token falls back to its <0xNN> byte tokens.
 *  - Byte-level BPE ("gpt2"): the text is split by the pre-tokeniser of
 *    tokenizer.ggml.pre (gpt2/default, llama3, qwen2), every byte is mapped
 *    to GPT-2's printable stand-in character, then merges are applied by
 *    rank (lowest first, leftmost on ties).
 *
 * In both, special tokens (control, user-defined and unknown types) are
 * first found in the raw text, longest first, and the text between them
 * is tokenized on its own.  With parse_special false only user-defined
 * tokens are matched (llama.cpp's rule).
 *
 * A tokenizer is immutable after creation: concurrent encode/piece calls
 * on one tokenizer are safe.
 */
#ifndef KVQ_TOKENIZER_H
#define KVQ_TOKENIZER_H

#include "gguf.h"

typedef enum kvq_tok_kind { KVQ_TOK_SPM = 0, KVQ_TOK_BPE } kvq_tok_kind;

/* BPE pre-tokenisers (tokenizer.ggml.pre): "default"/"gpt2" (and absent)
 * -> GPT2, "llama3"/"llama-v3"/"llama-bpe" -> LLAMA3, "qwen2" -> QWEN2. */
typedef enum kvq_tok_pre { KVQ_PRE_GPT2 = 0, KVQ_PRE_LLAMA3, KVQ_PRE_QWEN2 } kvq_tok_pre;

/* Token types as stored in tokenizer.ggml.token_type. */
enum {
    KVQ_TOKTYPE_UNDEFINED = 0, KVQ_TOKTYPE_NORMAL = 1, KVQ_TOKTYPE_UNKNOWN = 2,
    KVQ_TOKTYPE_CONTROL = 3, KVQ_TOKTYPE_USER_DEFINED = 4, KVQ_TOKTYPE_UNUSED = 5,
    KVQ_TOKTYPE_BYTE = 6
};

/* Everything a tokenizer is made from.  Strings are (ptr, len), not
 * NUL-terminated; all arrays are copied, so they need not outlive the
 * call.  scores may be NULL (all 0), token_types NULL (all NORMAL),
 * merges ("left right", BPE only) NULL when n_merges is 0.  Ids < 0 mean
 * "none". */
typedef struct kvq_tokenizer_desc {
    kvq_tok_kind kind;
    kvq_tok_pre pre;
    int32_t n_vocab;
    const gguf_str *tokens;
    const float *scores;
    const int32_t *token_types;
    int32_t n_merges;
    const gguf_str *merges;
    int32_t bos, eos, unk, pad;
    bool add_bos, add_eos;
    bool add_space_prefix;     /* SPM: prepend " " to each text segment */
    bool ignore_merges;        /* BPE: a pre-token that is a token is kept whole (llama3) */
} kvq_tokenizer_desc;

/* The defaults llama.cpp uses for a kind and pre-tokeniser: SPM adds BOS
 * and a space prefix; BPE adds BOS only for llama3 (which also ignores
 * merges for whole-token words).  Ids are -1, arrays NULL. */
void kvq_tokenizer_desc_default(kvq_tokenizer_desc *d, kvq_tok_kind kind, kvq_tok_pre pre);

kvq_status kvq_tokenizer_create(const kvq_tokenizer_desc *d, kvq_tokenizer **out, kvq_error *err);

/* From a GGUF's tokenizer.ggml.* keys (model, tokens, scores, token_type,
 * merges, pre, *_token_id, add_bos_token, add_eos_token, add_space_prefix). */
kvq_status kvq_tokenizer_load(const gguf_file *f, kvq_tokenizer **out, kvq_error *err);

/* Freeing, encoding, pieces and the vocabulary's queries are public
 * (kvq.h, "tokenizer"): kvq_tokenizer_free, kvq_tokenizer_encode
 * (add_special: BOS and/or EOS as the vocabulary's add_bos/add_eos flags
 * say, llama.cpp's add_special), kvq_tokenizer_piece (as llama.cpp's
 * token_to_piece without special-token rendering: control tokens ->
 * nothing; SPM: "▁" -> " ", <0xNN> -> that byte, the unknown token -> "▅"
 * (U+2585); BPE: byte-level characters -> their bytes, user-defined and
 * unknown tokens -> their text; a piece is never longer than the token's
 * text or 3 bytes, whichever is more), n_vocab, bos, eos, add_bos. */

kvq_tok_kind kvq_tokenizer_kind(const kvq_tokenizer *t);

#endif
