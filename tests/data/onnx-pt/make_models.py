#!/usr/bin/python3
"""Builds small versions of the architectures of issue 14, written the way
their upstream code writes them, and exports each with torch.onnx.export
(opset 17 unless named otherwise, training mode, a dynamic batch axis).

Each model X gets X.onnx and X.json: PyTorch's parameter count (parameters
only, not buffers), the fixed input (`input`, and `attention_mask` for BERT),
the labels, the reference output (first outputs, flattened) and the first
cross-entropy loss of the model's output on that batch. Dropout is 0 so the
references are deterministic; BatchNorm runs on batch statistics (training
mode), as weft's batchnorm does.

Needs PyTorch (Debian 12: apt-get install python3-torch); the test suite
does not: run this once and commit its outputs.
    /usr/bin/python3 tests/data/onnx-pt/make_models.py
"""
import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

OUT = os.path.dirname(os.path.abspath(__file__))
B = 2          # the batch of the references (the export's batch axis is dynamic)


# ---- nanoGPT (Karpathy), the manual attention path, minGPT's tanh GELU ----------------

class NewGELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, additive=False):
        super().__init__()
        self.additive = additive
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(0.0)
        self.resid_dropout = nn.Dropout(0.0)
        self.n_head, self.n_embd = n_head, n_embd
        if additive:
            # GPT-2 ports that keep an additive mask: 0 on and below the diagonal, -inf above
            self.register_buffer("mask", torch.triu(torch.full((block_size, block_size), float('-inf')), 1))
        else:
            self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size))
                                 .view(1, 1, block_size, block_size))

    def forward(self, x):
        B_, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B_, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B_, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B_, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        if self.additive:
            att = att + self.mask[:T, :T]
        else:
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B_, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = NewGELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd)
        self.dropout = nn.Dropout(0.0)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size, additive=False):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, additive)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, vocab=64, block_size=16, n_layer=2, n_head=2, n_embd=32, additive=False):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            drop=nn.Dropout(0.0),
            h=nn.ModuleList([Block(n_embd, n_head, block_size, additive) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd),
        ))
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying

    def forward(self, idx):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        tok_emb = self.transformer.wte(idx)
        pos_emb = self.transformer.wpe(pos)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        return self.lm_head(x)


# ---- Hugging Face-style BERT (BertEmbeddings / BertSelfAttention / MLM head) -----------

class BertEmbeddings(nn.Module):
    def __init__(self, vocab, hidden, max_pos, type_vocab=2):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = nn.Embedding(max_pos, hidden)
        self.token_type_embeddings = nn.Embedding(type_vocab, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(0.0)
        self.register_buffer("position_ids", torch.arange(max_pos).expand((1, -1)))
        self.register_buffer("token_type_ids", torch.zeros((1, max_pos), dtype=torch.long))

    def forward(self, input_ids):
        seq_length = input_ids.size(1)
        position_ids = self.position_ids[:, :seq_length]
        token_type_ids = self.token_type_ids[:, :seq_length].expand(input_ids.size(0), seq_length)
        emb = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        emb = emb + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(emb))


class BertLayer(nn.Module):
    def __init__(self, hidden, heads, inter):
        super().__init__()
        self.num_attention_heads, self.attention_head_size = heads, hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.attn_out = nn.Linear(hidden, hidden)
        self.attn_ln = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, inter)
        self.output = nn.Linear(inter, hidden)
        self.out_ln = nn.LayerNorm(hidden, eps=1e-12)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(new_x_shape).permute(0, 2, 1, 3)

    def forward(self, h, ext_mask):
        q = self.transpose_for_scores(self.query(h))
        k = self.transpose_for_scores(self.key(h))
        v = self.transpose_for_scores(self.value(h))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.attention_head_size)
        scores = scores + ext_mask
        probs = nn.functional.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        ctx = ctx.view(ctx.size()[:-2] + (q.size(1) * q.size(3),))
        a = self.attn_ln(self.attn_out(ctx) + h)
        return self.out_ln(self.output(F.gelu(self.intermediate(a))) + a)


class Bert(nn.Module):
    def __init__(self, vocab=64, hidden=32, layers=2, heads=2, inter=64, max_pos=24):
        super().__init__()
        self.embeddings = BertEmbeddings(vocab, hidden, max_pos)
        self.layers = nn.ModuleList([BertLayer(hidden, heads, inter) for _ in range(layers)])
        self.transform = nn.Linear(hidden, hidden)
        self.transform_ln = nn.LayerNorm(hidden, eps=1e-12)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, input_ids, attention_mask):
        ext = attention_mask[:, None, None, :].to(torch.float32)
        ext = (1.0 - ext) * torch.finfo(torch.float32).min
        h = self.embeddings(input_ids)
        for layer in self.layers:
            h = layer(h, ext)
        return self.decoder(self.transform_ln(F.gelu(self.transform(h))))


# ---- PyTorch's nn.TransformerEncoder ----------------------------------------------------

class TorchEncoderLM(nn.Module):
    def __init__(self, vocab=64, d=32, heads=2, ff=64, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        return self.head(self.encoder(self.emb(idx)))


# ---- torchvision-style CNNs -------------------------------------------------------------

def conv_bn(cin, cout, k, s, groups=1, act=nn.ReLU6):
    return nn.Sequential(nn.Conv2d(cin, cout, k, s, (k - 1) // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), act(inplace=True) if act else nn.Identity())


class InvertedResidual(nn.Module):
    """torchvision.models.mobilenetv2.InvertedResidual."""
    def __init__(self, inp, oup, stride, expand_ratio):
        super().__init__()
        hidden = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers = []
        if expand_ratio != 1:
            layers.append(conv_bn(inp, hidden, 1, 1))
        layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden),
                   nn.Conv2d(hidden, oup, 1, 1, 0, bias=False), nn.BatchNorm2d(oup)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        feats = [conv_bn(3, 8, 3, 2)]
        for t, c, n, s, inp in [(1, 8, 1, 1, 8), (6, 12, 2, 2, 8), (6, 16, 1, 2, 12)]:
            for i in range(n):
                feats.append(InvertedResidual(inp if i == 0 else c, c, s if i == 0 else 1, t))
        feats.append(conv_bn(16, 32, 1, 1))
        self.features = nn.Sequential(*feats)
        self.classifier = nn.Sequential(nn.Dropout(0.0), nn.Linear(32, classes))

    def forward(self, x):
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
        return self.classifier(torch.flatten(x, 1))


class SqueezeExcitation(nn.Module):
    """torchvision.ops.SqueezeExcitation with MobileNetV3's Hardsigmoid."""
    def __init__(self, c, sq):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(c, sq, 1)
        self.fc2 = nn.Conv2d(sq, c, 1)
        self.activation = nn.ReLU()
        self.scale_activation = nn.Hardsigmoid()

    def forward(self, x):
        s = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return s * x


class MobileNetV3Block(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = conv_bn(3, 8, 3, 2, act=nn.Hardswish)
        self.expand = conv_bn(8, 16, 1, 1, act=nn.Hardswish)
        self.dw = conv_bn(16, 16, 3, 1, groups=16, act=nn.Hardswish)
        self.se = SqueezeExcitation(16, 8)
        self.project = conv_bn(16, 8, 1, 1, act=None)
        self.last = conv_bn(8, 24, 1, 1, act=nn.Hardswish)
        self.classifier = nn.Sequential(nn.Linear(24, 32), nn.Hardswish(inplace=True),
                                        nn.Dropout(0.0), nn.Linear(32, classes))

    def forward(self, x):
        x = self.stem(x)
        x = x + self.project(self.se(self.dw(self.expand(x))))
        x = self.last(x)
        x = torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)
        return self.classifier(x)


class Fire(nn.Module):
    """torchvision.models.squeezenet.Fire."""
    def __init__(self, inplanes, squeeze, e1, e3):
        super().__init__()
        self.squeeze = nn.Conv2d(inplanes, squeeze, 1)
        self.squeeze_activation = nn.ReLU(inplace=True)
        self.expand1x1 = nn.Conv2d(squeeze, e1, 1)
        self.expand1x1_activation = nn.ReLU(inplace=True)
        self.expand3x3 = nn.Conv2d(squeeze, e3, 3, padding=1)
        self.expand3x3_activation = nn.ReLU(inplace=True)

    def forward(self, x):
        x = self.squeeze_activation(self.squeeze(x))
        return torch.cat([self.expand1x1_activation(self.expand1x1(x)),
                          self.expand3x3_activation(self.expand3x3(x))], 1)


class SqueezeNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 7, stride=2), nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(16, 4, 8, 8), Fire(16, 4, 8, 8),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(16, 8, 16, 16))
        self.classifier = nn.Sequential(nn.Dropout(0.0), nn.Conv2d(32, classes, 1),
                                        nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d((1, 1)))

    def forward(self, x):
        return torch.flatten(self.classifier(self.features(x)), 1)


class DenseLayer(nn.Module):
    """torchvision.models.densenet._DenseLayer (bottleneck, concat of features)."""
    def __init__(self, cin, growth, bn_size):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(cin)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=0, bias=False)

    def forward(self, feats):
        x = torch.cat(feats, 1)
        x = self.conv1(self.relu1(self.norm1(x)))
        x = self.relu2(self.norm2(x))
        return self.conv2(F.pad(x, (1, 1, 1, 1)))


class DenseNet(nn.Module):
    def __init__(self, classes=10, growth=4, bn_size=2):
        super().__init__()
        self.conv0 = nn.Conv2d(3, 8, 3, 1, 1, bias=False)
        self.norm0 = nn.BatchNorm2d(8)
        self.pool0 = nn.MaxPool2d(3, 2, 1)
        self.layers = nn.ModuleList([DenseLayer(8 + i * growth, growth, bn_size) for i in range(2)])
        c = 8 + 2 * growth
        self.trans_norm = nn.BatchNorm2d(c)
        self.trans_conv = nn.Conv2d(c, c // 2, 1, bias=False)
        self.trans_pool = nn.AvgPool2d(2, 2)
        self.norm5 = nn.BatchNorm2d(c // 2)
        self.classifier = nn.Linear(c // 2, classes)

    def forward(self, x):
        x = self.pool0(F.relu(self.norm0(self.conv0(x))))
        feats = [x]
        for layer in self.layers:
            feats.append(layer(feats))
        x = torch.cat(feats, 1)
        x = self.trans_pool(self.trans_conv(F.relu(self.trans_norm(x))))
        x = F.relu(self.norm5(x))
        x = torch.flatten(F.adaptive_avg_pool2d(x, (1, 1)), 1)
        return self.classifier(x)


# ---- an nn.LSTM language model ------------------------------------------------------------

class LSTMLM(nn.Module):
    def __init__(self, vocab=64, d=32):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.rnn = nn.LSTM(d, d, batch_first=True)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        return self.head(self.rnn(self.emb(idx))[0])


# ---- reductions (issue 26): torchvision's ShuffleNet V2, and every reduction PyTorch exports ----

def ShuffleNetV2Small():
    # torchvision's own ShuffleNetV2 class (its global pool is x.mean([2, 3]),
    # exported as ReduceMean), with one block per stage and narrow channels
    import torchvision
    return torchvision.models.ShuffleNetV2([1, 1, 1], [8, 16, 32, 64, 128], num_classes=10)


class Reductions(nn.Module):
    # ReduceSum, ReduceMax, ReduceMin and ReduceMean (keepdims and not, over
    # one axis, two axes and leading axes) on conv features
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.head = nn.Linear(8 * 6, 10)

    def forward(self, x):
        h = self.conv(x)                                        # [B, 8, 16, 16]
        a = h.sum(dim=(2, 3)) / 256.0                           # ReduceSum over H, W
        b = h.amax(dim=(2, 3))                                  # ReduceMax
        c = h.amin(dim=(2, 3))                                  # ReduceMin
        d = h.mean(dim=3, keepdim=True).mean(dim=2)[:, :, 0]    # ReduceMean keepdims, then not
        e = (h * h).sum(dim=(2, 3), keepdim=True)[:, :, 0, 0] / 256.0  # sum of squares
        f = h.transpose(1, 3).mean(dim=(1, 2))                  # ReduceMean over leading axes
        return self.head(torch.cat([a, b, c, d, e, f], dim=1))


# ---- export ---------------------------------------------------------------------------------

def export(name, model, inputs, input_names, labels, opset=17, dynamic=True):
    torch.manual_seed(0)
    model.train()
    with torch.no_grad():
        out = model(*inputs)
        V = out.shape[-1]
        loss = F.cross_entropy(out.reshape(-1, V), labels.reshape(-1))
    axes = {n: {0: 'batch'} for n in input_names}
    axes['output'] = {0: 'batch'}
    path = os.path.join(OUT, name + '.onnx')
    torch.onnx.export(model, tuple(inputs), path, opset_version=opset,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=input_names, output_names=['output'],
                      dynamic_axes=axes if dynamic else None)
    params = sum(p.numel() for p in model.parameters())
    ref = {
        'model': name,
        'opset': opset,
        'torch': torch.__version__,
        'params': params,
        'inputs': {n: {'shape': list(x.shape), 'data': x.reshape(-1).tolist()}
                   for n, x in zip(input_names, inputs)},
        'labels': {'shape': list(labels.shape), 'data': labels.reshape(-1).tolist()},
        'output': {'shape': list(out.shape), 'data': [round(float(v), 7) for v in out.reshape(-1)]},
        'loss': float(loss),
    }
    with open(os.path.join(OUT, name + '.json'), 'w') as f:
        json.dump(ref, f, indent=1)
        f.write('\n')
    print(f'{name}: {params} params, loss {float(loss):.6f}, {os.path.getsize(path)} bytes')


def main():
    g = torch.Generator().manual_seed(1234)
    T = 8
    ids = torch.randint(0, 64, (B, T), generator=g)
    tgt = torch.randint(0, 64, (B, T), generator=g)
    img = torch.randn(B, 3, 32, 32, generator=g)
    cls = torch.randint(0, 10, (B,), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 6:] = 0
    models = [
        ('gpt', GPT, (ids,), ['input'], tgt, 17, True),
        ('gpt_opset14', GPT, (ids,), ['input'], tgt, 14, True),
        ('gpt_fixed_batch', GPT, (ids,), ['input'], tgt, 17, False),
        ('gpt2_additive_mask', lambda: GPT(additive=True), (ids,), ['input'], tgt, 17, True),
        ('bert', Bert, (ids, mask), ['input', 'attention_mask'], tgt, 17, True),
        ('torch_encoder', TorchEncoderLM, (ids,), ['input'], tgt, 17, True),
        ('mobilenet_v2', MobileNetV2, (img,), ['input'], cls, 17, True),
        ('mobilenet_v3', MobileNetV3Block, (img,), ['input'], cls, 17, True),
        ('squeezenet', SqueezeNet, (img,), ['input'], cls, 17, True),
        ('densenet', DenseNet, (img,), ['input'], cls, 17, True),
        ('lstm_lm', LSTMLM, (ids,), ['input'], tgt, 17, True),
        ('shufflenet_v2', ShuffleNetV2Small, (img,), ['input'], cls, 17, True),
        ('reductions', Reductions, (img,), ['input'], cls, 17, True),
    ]
    only = sys.argv[1:]
    for name, cls_, inputs, names, labels, opset, dyn in models:
        if only and name not in only:
            continue
        torch.manual_seed(0)
        export(name, cls_(), inputs, names, labels, opset, dyn)


if __name__ == '__main__':
    main()
