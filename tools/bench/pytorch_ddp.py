#!/usr/bin/env python3
"""Stock PyTorch DDP training DeepFM on the kit's ctr-small shards: the baseline `ddplab bench
pytorch` measures the kit's trainer against (issue 18).

Written the way a PyTorch user writes it, not handicapped: the shards memory-mapped with numpy, a
Dataset that takes a list of indices (one vectorised gather a batch, not 512 __getitem__ calls),
DistributedSampler with set_epoch, BatchSampler, DataLoader (no worker processes: one process a
core), DistributedDataParallel with its defaults (25 MiB buckets, overlapped all-reduce, Gloo),
torch.optim.Adam. The model is the kit's DeepFM (common/src/deepfm.cpp): one [167394, D] table for
the 26 fields, a first-order table, a dense linear term, the FM square-of-sum term and a
429-400-400-400-1 ReLU MLP.

Run under torchrun (one process a rank). Rank 0 prints one line `PYTORCH_RESULT {json}`: the
median step time after the warm-up (a step includes fetching its batch, as the kit's includes its
data wait), the job's samples/s from it, and with --eval-samples the test
AUC after training.
"""
import argparse
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import BatchSampler, DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

CARDINALITY = [1000, 500, 20000, 10000, 200, 20, 10000, 500, 3, 10000, 5000, 20000, 3000, 27,
               10000, 20000, 10, 5000, 2000, 4, 20000, 15, 15, 20000, 100, 10000]
OFFSET = np.concatenate([[0], np.cumsum(CARDINALITY)[:-1]]).astype(np.int64)
ROWS = int(sum(CARDINALITY))  # 167,394
RECORD = np.dtype([("label", "<u4"), ("dense", "<f4", (13,)), ("ids", "<u4", (26,))])  # 160 bytes
HEADER = 64


def load_split(data, names):
    parts = [np.memmap(os.path.join(data, n), dtype=RECORD, mode="r", offset=HEADER) for n in names]
    records = np.concatenate(parts)
    dense = torch.from_numpy(np.ascontiguousarray(records["dense"]))
    rows = torch.from_numpy(records["ids"].astype(np.int64) + OFFSET)
    labels = torch.from_numpy(records["label"].astype(np.float32))
    return dense, rows, labels


class Shards(Dataset):
    """The training split; indexing with a list of positions gathers a whole batch at once."""

    def __init__(self, dense, rows, labels):
        self.dense, self.rows, self.labels = dense, rows, labels

    def __len__(self):
        return self.labels.shape[0]

    def __getitem__(self, idx):
        i = torch.as_tensor(idx)
        return self.dense[i], self.rows[i], self.labels[i]


class DeepFM(nn.Module):
    def __init__(self, dim=16, hidden=400, layers=3, init_std=0.01):
        super().__init__()
        self.embedding = nn.Embedding(ROWS, dim)
        self.first_order = nn.Embedding(ROWS, 1)
        self.dense_linear = nn.Linear(13, 1)
        with torch.no_grad():
            self.embedding.weight.normal_(0.0, init_std)
            self.first_order.weight.normal_(0.0, init_std)
        mlp, width = [], 26 * dim + 13
        for _ in range(layers):
            mlp += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        mlp.append(nn.Linear(width, 1))
        self.mlp = nn.Sequential(*mlp)

    def forward(self, dense, rows):
        e = self.embedding(rows)  # [B, 26, D]
        first = self.first_order(rows).sum((1, 2)) + self.dense_linear(dense).squeeze(1)
        s = e.sum(1)
        fm = 0.5 * (s.pow(2) - e.pow(2).sum(1)).sum(1)
        deep = self.mlp(torch.cat([e.flatten(1), dense], 1)).squeeze(1)
        return first + fm + deep


def auc(scores, labels):
    """Area under the ROC curve, ties counted half (the Mann-Whitney statistic)."""
    order = np.argsort(scores, kind="mergesort")
    s, y = scores[order], labels[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):  # average rank over ties
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[i:j + 1] = (i + j) / 2.0 + 1
        i = j + 1
    pos = y.sum()
    neg = len(y) - pos
    return float((ranks[y == 1].sum() - pos * (pos + 1) / 2) / (pos * neg))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: one epoch)")
    ap.add_argument("--warmup", type=int, default=10, help="steps left out of the timing")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--eval-samples", type=int, default=0, help="test samples for the AUC (0: none)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1
    meta = json.load(open(os.path.join(a.data, "meta.json")))
    train = Shards(*load_split(a.data, meta["train_shards"]))

    torch.manual_seed(a.seed)
    model = DeepFM()
    ddp = DistributedDataParallel(model) if distributed else model
    # The kit's rule: the learning rate scaled with the global batch (lab 06; --lr at 512).
    opt = torch.optim.Adam(ddp.parameters(), lr=a.lr * a.batch * world / 512)
    loss_fn = nn.BCEWithLogitsLoss()
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=a.seed, drop_last=True)
    sampler.set_epoch(0)
    loader = DataLoader(train, sampler=BatchSampler(sampler, a.batch, drop_last=True), batch_size=None)

    steps = a.steps if a.steps > 0 else len(loader)
    times = []
    # A step is timed from the end of the previous one, so it includes fetching its batch, as the
    # kit's step includes its data wait (LabRun::next_batch): both sides measure the same loop.
    batches = iter(loader)
    t = time.perf_counter()
    for k in range(steps):
        try:
            dense, rows, labels = next(batches)
        except StopIteration:
            break
        opt.zero_grad()
        loss = loss_fn(ddp(dense, rows), labels)
        loss.backward()
        opt.step()
        now = time.perf_counter()
        times.append(now - t)
        t = now
    timed = times[a.warmup:] if len(times) > a.warmup else times
    median = float(np.median(timed))
    if distributed:  # the job's step is the slowest rank's
        t = torch.tensor([median], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        median = float(t.item())
    result = {"ranks": world, "batch": a.batch, "steps": len(times), "step_median_s": median,
              "samples_per_s": world * a.batch / median, "torch": torch.__version__}
    if a.eval_samples > 0 and rank == 0:
        dense, rows, labels = load_split(a.data, meta["test_shards"])
        n = min(a.eval_samples, labels.shape[0])
        with torch.no_grad():
            model.eval()
            scores = torch.cat([model(dense[i:i + 4096], rows[i:i + 4096]) for i in range(0, n, 4096)])
        result["test_auc"] = auc(scores[:n].numpy().astype(np.float64), labels[:n].numpy())
        result["eval_samples"] = n
    if rank == 0:
        print("PYTORCH_RESULT " + json.dumps(result), flush=True)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
