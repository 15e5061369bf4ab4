"""BERT-style encoder, written the way Hugging Face's BertModel writes it.

Token + position + segment (token_type) embeddings followed by LayerNorm, post-LN blocks
(`LayerNorm(x + sublayer(x))`), bidirectional self-attention with an additive padding mask made from
the int64 `attention_mask` input (`(1 - mask) * finfo(float32).min`), erf GELU (`nn.GELU()`) in the
MLP, and a pooler: `tanh(dense(h[:, 0]))` on the [CLS] position (Devlin et al. 2019).

Shapes: input_ids, token_type_ids, attention_mask int64 [B, T] ->
last_hidden_state float32 [B, T, hidden], pooler_output float32 [B, hidden].
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class BertConfig:
    vocab_size: int = 256
    max_position_embeddings: int = 64
    type_vocab_size: int = 2
    n_layer: int = 2
    n_head: int = 4
    hidden: int = 64
    intermediate: int = 256
    layer_norm_eps: float = 1e-12


class Embeddings(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden)
        self.LayerNorm = nn.LayerNorm(cfg.hidden, eps=cfg.layer_norm_eps)
        self.register_buffer("position_ids", torch.arange(cfg.max_position_embeddings).expand((1, -1)))

    def forward(self, input_ids, token_type_ids):
        T = input_ids.shape[1]
        position_ids = self.position_ids[:, :T]
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids) \
            + self.position_embeddings(position_ids)
        return self.LayerNorm(x)


class SelfAttention(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.head_dim = cfg.hidden // cfg.n_head
        self.query = nn.Linear(cfg.hidden, cfg.hidden)
        self.key = nn.Linear(cfg.hidden, cfg.hidden)
        self.value = nn.Linear(cfg.hidden, cfg.hidden)

    def split_heads(self, x):
        B, T, _ = x.shape
        return x.view(B, T, self.n_head, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x, ext_mask):
        q = self.split_heads(self.query(x))
        k = self.split_heads(self.key(x))
        v = self.split_heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        scores = scores + ext_mask
        probs = F.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return ctx.view(ctx.shape[0], ctx.shape[1], -1)


class Layer(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.attention = SelfAttention(cfg)
        self.attention_output = nn.Linear(cfg.hidden, cfg.hidden)
        self.attention_norm = nn.LayerNorm(cfg.hidden, eps=cfg.layer_norm_eps)
        self.intermediate = nn.Linear(cfg.hidden, cfg.intermediate)
        self.act = nn.GELU()  # erf form
        self.output = nn.Linear(cfg.intermediate, cfg.hidden)
        self.output_norm = nn.LayerNorm(cfg.hidden, eps=cfg.layer_norm_eps)

    def forward(self, x, ext_mask):
        x = self.attention_norm(x + self.attention_output(self.attention(x, ext_mask)))
        return self.output_norm(x + self.output(self.act(self.intermediate(x))))


class Bert(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.cfg = cfg
        self.embeddings = Embeddings(cfg)
        self.encoder = nn.ModuleList([Layer(cfg) for _ in range(cfg.n_layer)])
        self.pooler = nn.Linear(cfg.hidden, cfg.hidden)

    def forward(self, input_ids, token_type_ids, attention_mask):
        # [B, T] int64 (1 = attend, 0 = padding) -> additive [B, 1, 1, T] float32.
        ext_mask = attention_mask[:, None, None, :].to(torch.float32)
        ext_mask = (1.0 - ext_mask) * torch.finfo(torch.float32).min
        x = self.embeddings(input_ids, token_type_ids)
        for layer in self.encoder:
            x = layer(x, ext_mask)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return x, pooled
