"""How the world model's losses depend on a step's position in its replayed window: the KL and the image loss at each
of 2T steps filtered from the zero state, for a dreamer_v2_dmc.py checkpoint.

A window's first T steps are what a batch row sees when it starts from the zero state (the official DreamerV2, and
ours with --no-tbptt); its last T steps are what a row sees when it carries the state of the T steps before (ours with
--tbptt). The two halves' means are then the logged `kl`/`image` of the two ways of sampling, on the same weights.

    python benchmarks/parity/kl_by_position.py runs/<run_name>/checkpoint.pt --windows 256
"""

import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import dreamer_v2_dmc as script  # noqa: E402


def window_starts(is_first: np.ndarray, length: int) -> np.ndarray:
    """Every start of a window of `length` steps that lies inside one episode: no episode starts after its first step.
    Steps before the first is_first (an episode whose start was overwritten) are left out."""
    firsts = np.flatnonzero(is_first)
    ends = np.append(firsts[1:], len(is_first))
    return np.concatenate([np.arange(a, b - length + 1) for a, b in zip(firsts, ends) if b - a >= length] + [[]]).astype(int)


def filter_batch(wm, obs, action, is_first, carry: tuple) -> tuple:
    """The world model's filter over a [T, B] batch from carry (state, last action), as world_model_loss runs it:
    returns the posteriors and KL(post || prior) per step [T, B], unclipped."""
    state, prev_action = carry
    prev_actions = torch.cat([prev_action[None], action[:-1]], 0)  # a_{t-1}
    post, prior = wm.rssm.observe(wm.encoder(obs), prev_actions, is_first, state)
    return post, script.categorical_kl(post["logits"], prior["logits"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", help="runs/<run_name>/checkpoint.pt of a dreamer_v2_dmc.py run (--checkpoint-buffer)")
    parser.add_argument("--windows", type=int, default=256, help="windows sampled from the replay, each of 2T steps")
    parser.add_argument("--batch", type=int, default=32, help="windows per forward pass")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--every", type=int, default=5, help="print every this many positions")
    parser.add_argument("--batches", type=int, default=0, help="also draw this many batches as the run's own replay "
                        "does (from the checkpoint's rows and TBPTT carry, and again with --no-tbptt's fresh windows), "
                        "and report how often the batch's mean KL falls below the free nats, where the KL term has no "
                        "gradient")  # fmt: skip
    cli = parser.parse_args()

    checkpoint = script.load_checkpoint(cli.checkpoint)
    args = script.Args(**{k: v for k, v in checkpoint["args"].items() if k in script.Args.__dataclass_fields__})
    replay = checkpoint["replay"]
    if "obs" not in replay:
        sys.exit(f"{cli.checkpoint}: this checkpoint holds no replay data; use one written with --checkpoint-buffer")
    obs, action = replay["obs"][:, 0], replay["action"][:, 0]  # env 0: [steps, C, H, W], [steps, A]
    is_first = replay["is_first"][:, 0].numpy()
    T = args.batch_length
    wm = script.WorldModel(tuple(obs.shape[1:]), action.shape[-1], args)
    wm.load_state_dict(checkpoint["wm"])
    wm.eval()

    starts = window_starts(is_first, 2 * T)
    if len(starts) < cli.windows:
        sys.exit(f"{cli.checkpoint}: the replay holds {len(starts)} windows of {2 * T} steps inside an episode; pass "
                 f"--windows {len(starts)} or fewer")  # fmt: skip
    rng = np.random.default_rng(cli.seed)
    chosen = rng.choice(starts, cli.windows, replace=False)

    kl_sum, image_sum = torch.zeros(2 * T), torch.zeros(2 * T)
    with torch.no_grad():
        for i in range(0, cli.windows, cli.batch):
            s = torch.as_tensor(chosen[i : i + cli.batch])
            idx = s[None] + torch.arange(2 * T)[:, None]  # [2T, B]
            B = idx.shape[1]
            batch_obs, batch_action = obs[idx], action[idx]
            first = torch.zeros(2 * T, B, dtype=torch.bool)
            first[0] = True
            carry = (wm.rssm.initial(B), torch.zeros_like(batch_action[0]))
            post, kl = filter_batch(wm, batch_obs, batch_action, first, carry)
            kl_sum += kl.sum(1)
            recon = wm.decoder(wm.rssm.get_feat(post))
            image_sum += script.gaussian_nll(recon, batch_obs.float() / 255.0, event_dims=3).sum(1)
    kl, image = kl_sum / cli.windows, image_sum / cli.windows
    const = 0.5 * np.log(2 * np.pi) * np.prod(obs.shape[1:])  # the unit-variance Gaussian's constant, summed over pixels
    print(f"{cli.checkpoint}: policy step {checkpoint['global_step']}, {cli.windows} windows of 2 x {T} steps, "
          f"free nats {args.kl_free}")  # fmt: skip
    print("position  KL (nats)  image loss less its constant")
    for t in range(0, 2 * T, cli.every):
        print(f"{t:8d}  {kl[t]:9.3f}  {image[t] - const:9.3f}")
    for name, part in (("zero start (steps 0..T-1)", slice(0, T)), ("carried state (steps T..2T-1)", slice(T, 2 * T))):
        print(f"{name:32s} KL {kl[part].mean():.3f}  image {image[part].mean() - const:.3f}")
    for tbptt in (True, False) if cli.batches else ():
        kls = sampled_kl(wm, checkpoint, args, tbptt, cli.batches)
        print(f"{cli.batches} batches as {'--tbptt' if tbptt else '--no-tbptt'} samples them: mean KL {kls.mean():.3f} "
              f"(batches {kls.min():.3f}-{kls.max():.3f}), below the free nats ({args.kl_free}) in "
              f"{(kls < args.kl_free).mean():.0%} of them")  # fmt: skip


def sampled_kl(wm, checkpoint: dict, args, tbptt: bool, batches: int) -> np.ndarray:
    """The unclipped batch-mean KL of `batches` batches drawn by the run's SequenceReplay, restored from the checkpoint
    (its rows and random generator), each filtered from the carry that training would start it from (with --tbptt, the
    checkpoint's carry and then each batch's last posterior). The weights stay the checkpoint's, and no new data comes
    in, so rows that reach the newest step start afresh, a little more often than in training."""
    saved = checkpoint["replay"]
    obs_shape, action_size = tuple(saved["obs"].shape[2:]), saved["action"].shape[-1]
    capacity = min(args.buffer_size, args.total_timesteps)
    rb = script.SequenceReplay(capacity, args.num_envs, obs_shape, action_size, args.batch_size, args.batch_length,
                               tbptt, args.tbptt_jump_prob, 0)  # fmt: skip
    rb.load_state_dict(saved)
    state, prev_action = (
        checkpoint["carry"] if tbptt else (wm.rssm.initial(args.batch_size), torch.zeros(args.batch_size, action_size))
    )
    kls = []
    with torch.no_grad():
        for _ in range(batches):
            batch = {k: torch.as_tensor(v) for k, v in rb.sample().items()}
            post, kl = filter_batch(wm, batch["obs"], batch["action"], batch["is_first"], (state, prev_action))
            kls.append(kl.mean().item())
            state, prev_action = {k: v[-1] for k, v in post.items()}, batch["action"][-1]
    return np.array(kls)


if __name__ == "__main__":
    main()
