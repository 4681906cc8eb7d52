#!/usr/bin/env python3
"""PyTorch reference of dml-bench train: the mlp app's model in one process.

dml-bench train runs this script in the same run as its own single process,
with the job's settings on the command line, so that the two are compared on
one machine at one time: an MLP of ReLU hidden layers (softmax regression
without any) on IDX image/label files, pixels scaled by x / 255, every
weight and bias drawn uniform in [-init_scale, init_scale] of its layer, the
mean cross-entropy of a batch, and the optimizer of the job's tables (sgd,
momentum or adam, with lr / (1 + lr_decay * (t - 1)) at the t-th update).

Like dml's single process it copies the model every tenth of an epoch with
its clock stopped, and scores the copies on the test set only after the
training, so that the time to the target is training time alone. It prints
one line of KEY=VALUE figures, starting "torch ", for dml-bench to read;
errors go to stderr with exit status 1 (2: torch is not installed).
"""
import argparse
import gzip
import os
import sys
import time


def idx_read(path, numpy):
    """The records of an IDX file (gzipped or not) as a uint8 array."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 8:
        raise ValueError("%s: not an IDX file of unsigned bytes" % path)
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    data = numpy.frombuffer(raw, dtype=numpy.uint8, offset=4 + 4 * ndim)
    return data.reshape(dims[0], -1)


def load(images, labels, torch, numpy):
    x = idx_read(images, numpy)
    y = idx_read(labels, numpy).reshape(-1)
    if len(x) != len(y):
        raise ValueError("%s: %d images, %s: %d labels" % (images, len(x), labels, len(y)))
    return (torch.from_numpy(x.astype(numpy.float32) / 255.0),
            torch.from_numpy(y.astype(numpy.int64)))


def model_make(torch, sizes, scales, seed):
    torch.manual_seed(seed)
    layers = []
    for i in range(len(sizes) - 1):
        lin = torch.nn.Linear(sizes[i], sizes[i + 1])
        with torch.no_grad():
            lin.weight.uniform_(-scales[i], scales[i])
            lin.bias.uniform_(-scales[i], scales[i])
        layers.append(lin)
        if i + 2 < len(sizes):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def optimizer_make(torch, a, params):
    if a.optimizer == "adam":
        opt = torch.optim.Adam(params, lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps,
                               weight_decay=a.weight_decay)
    elif a.optimizer in ("sgd", "momentum"):
        opt = torch.optim.SGD(params, lr=a.lr, weight_decay=a.weight_decay,
                              momentum=a.momentum if a.optimizer == "momentum" else 0)
    else:
        raise ValueError("optimizer %s has no PyTorch counterpart here" % a.optimizer)
    # dml: the t-th update (t >= 1) uses lr / (1 + lr_decay * (t - 1)).
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 1.0 / (1.0 + a.lr_decay * t))
    return opt, sched


def accuracy(torch, model, x, y):
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", required=True)
    p.add_argument("--labels", required=True)
    p.add_argument("--test-images", required=True)
    p.add_argument("--test-labels", required=True)
    p.add_argument("--hidden", default="", help="comma-separated hidden widths")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--init-scales", required=True, help="one per layer, comma-separated")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--optimizer", default="sgd")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--lr-decay", type=float, default=0.0)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.999)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--target", type=float, default=0.87)
    p.add_argument("--max-seconds", type=float, default=60)
    p.add_argument("--max-epochs", type=float, default=15)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    # Set before torch loads: OpenBLAS's own threads, as many as torch's;
    # and OpenMP threads that sleep when idle, for torch calls OpenBLAS
    # between its parallel regions, and spinning OpenMP threads took the
    # cores from OpenBLAS's (20 times slower on 2 busy cores).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(a.threads))
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import numpy
        import torch
    except ImportError as e:
        print("bench_torch: %s" % e, file=sys.stderr)
        return 2
    torch.set_num_threads(a.threads)
    x, y = load(a.images, a.labels, torch, numpy)
    tx, ty = load(a.test_images, a.test_labels, torch, numpy)
    hidden = [int(h) for h in a.hidden.split(",") if h.strip()]
    sizes = [x.shape[1]] + hidden + [a.classes]
    scales = [float(s) for s in a.init_scales.split(",")]
    if len(scales) != len(sizes) - 1:
        raise ValueError("%d init scales for %d layers" % (len(scales), len(sizes) - 1))
    model = model_make(torch, sizes, scales, a.seed)
    opt, sched = optimizer_make(torch, a, model.parameters())
    loss_fn = torch.nn.CrossEntropyLoss()
    n = x.shape[0]
    every = max(1, n // 10)
    steps_max = int(a.max_epochs * n / a.batch)
    copies = []             # (training seconds, examples, state)
    train_ns = examples = steps = 0
    next_copy = every
    done = False
    while not done:
        order = torch.randperm(n)
        for i in range(0, n - a.batch + 1, a.batch):
            t = time.perf_counter_ns()
            idx = order[i:i + a.batch]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            sched.step()
            train_ns += time.perf_counter_ns() - t
            examples += a.batch
            steps += 1
            done = train_ns >= a.max_seconds * 1e9 or steps >= steps_max
            if examples >= next_copy or done:
                copies.append((train_ns / 1e9, examples,
                               {k: v.clone() for k, v in model.state_dict().items()}))
                while next_copy <= examples:
                    next_copy += every
            if done:
                break
    t_target = ep_target = None
    acc = 0.0
    for secs, ex, state in copies:
        model.load_state_dict(state)
        acc = accuracy(torch, model, tx, ty)
        if t_target is None and acc >= a.target:
            t_target, ep_target = secs, ex / n
            break
    model.load_state_dict(copies[-1][2])
    acc = accuracy(torch, model, tx, ty)
    fig = {
        "version": torch.__version__,
        "threads": torch.get_num_threads(),
        "openblas_threads": os.environ["OPENBLAS_NUM_THREADS"],
        "omp_wait_policy": os.environ["OMP_WAIT_POLICY"],
        "optimizer": a.optimizer,
        "rate": "%.1f" % (examples / (train_ns / 1e9)),
        "step_us": "%.2f" % (train_ns / 1e3 / steps),
        "trained_s": "%.3f" % (train_ns / 1e9),
        "epochs": "%.3f" % (examples / n),
        "t_target": "nan" if t_target is None else "%.3f" % t_target,
        "ep_target": "nan" if ep_target is None else "%.3f" % ep_target,
        "final_acc": "%.4f" % acc,
        "copies": len(copies),
    }
    print("torch " + " ".join("%s=%s" % kv for kv in fig.items()), flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, ValueError) as e:
        print("bench_torch: %s" % e, file=sys.stderr)
        sys.exit(1)
