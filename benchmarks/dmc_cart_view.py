"""Where the cart goes in cartpole episodes, and how much of it the agent's camera sees. The scripts' DMC env renders
camera 0 of cartpole, a fixed camera 4 m in front of the rail's middle. The cart runs on a rail whose soft limit stops
it near |x| = 1.8-1.87; at 64 x 64 the camera shows it whole up to |x| of about 1.55, cut off at the frame's edge beyond
that, and never entirely out of view; the thin pole leaves the frame from |x| of about 1.7, so an agent that drives the
cart to the rail's end no longer sees what it balances. This plays episodes of a saved `dreamer_v2_dmc.py` agent (a
checkpoint.pt or a --save-model file), or of the zero or random policy, in the script's env, and after every policy
step counts the cart's and the pole's pixels in a segmentation render of the same camera at the same size: the share
of policy steps with the cart whole, the cart cut off, the pole out of view, the cart's distance from the middle, and
the episode's return; and two of the task reward's factors (a product of four): how upright the pole is, (1 + cos of
its angle) / 2, and how large the actions are (the control factor is (4 + tolerance(action)) / 5).

    MUJOCO_GL=egl python benchmarks/dmc_cart_view.py --checkpoint runs/cartpole-balance__paper__1__*/checkpoint.pt
    MUJOCO_GL=egl python benchmarks/dmc_cart_view.py --policy random --episodes 20
"""

import os
import sys
from dataclasses import dataclass, fields
from typing import Literal, Optional

import numpy as np
import torch
import tyro

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
os.environ.setdefault("MUJOCO_GL", "egl")
import dreamer_v2_dmc as script  # noqa: E402


@dataclass
class CartView:
    checkpoint: Optional[str] = None
    """a dreamer_v2_dmc.py checkpoint.pt or saved model of a cartpole task (needs --policy agent)"""
    policy: Literal["agent", "zero", "random"] = "agent"
    """agent: the saved agent's actions; zero: the middle of the action range; random: uniform actions"""
    task: str = "cartpole-balance"
    """the cartpole task, for the zero and random policies (an agent plays the task it was trained on)"""
    episodes: int = 5
    """episodes to play; episode k's initial state comes from seed k (1, 2, ...)"""
    greedy: bool = True
    """the agent plays the mode of its action distribution (as the scripts' evaluations), else samples"""


def pixels_of(physics, camera: int, size: int = 64) -> tuple:
    """(the cart's pixels, the pole's pixels) in a segmentation render of `camera` at `size` x `size`."""
    segmentation = physics.render(size, size, camera_id=camera, segmentation=True)[..., 0]
    return tuple(int((segmentation == physics.model.name2id(geom, "geom")).sum()) for geom in ("cart", "pole_1"))


def pixels_at(x: float, camera: int = 0) -> tuple:
    """(the cart's pixels, the pole's pixels) with the cart standing at `x` on the rail and the pole upright."""
    env = script.DMC("cartpole", "balance", camera=camera)
    physics = env.env.physics
    with physics.reset_context():
        physics.named.data.qpos["slider"] = x
        physics.named.data.qpos["hinge_1"] = 0.0
    pixels = pixels_of(physics, env.camera)
    env.close()
    return pixels


def play(args: CartView) -> tuple:
    """([(return, cart positions, (cart pixels, pole pixels), upright, |action|)] of each episode, one entry per policy
    step, upright = (1 + cos of the pole's angle) / 2 after the step and |action| its mean over the action's entries;
    the camera)."""
    if args.policy == "agent":
        if not args.checkpoint:
            raise SystemExit("dmc_cart_view.py: error: --policy agent needs --checkpoint PATH (or pick --policy zero/random)")
        saved = script.load_checkpoint(args.checkpoint, "--eval-model")
        trained = script.Args(**{f.name: saved["args"][f.name] for f in fields(script.Args) if f.name in saved["args"]})
        task, action_repeat, camera = trained.env_id, trained.action_repeat, trained.camera
    else:
        task, action_repeat, camera = args.task, 2, -1
    domain_task = script.dmc_task(task)
    if domain_task is None or domain_task[0] != "cartpole":
        raise SystemExit(f"dmc_cart_view.py: error: {task} is not a cartpole task")
    env = script.NormalizeAction(script.DMC(*domain_task, action_repeat=action_repeat, camera=camera))
    physics, view = env.unwrapped.env.physics, env.unwrapped.camera
    if args.policy == "agent":
        action_size = env.action_space.shape[0]
        wm = script.WorldModel((3, 64, 64), action_size, trained)
        feat_size = trained.deter_size + trained.stoch_size * trained.classes
        actor = script.Actor(feat_size, action_size, trained.mlp_units, trained.mlp_layers, trained.actor_min_std)
        wm.load_state_dict(saved["wm"])
        actor.load_state_dict(saved["actor"])
    episodes = []
    for seed in range(1, args.episodes + 1):
        obs, _ = env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        if args.policy == "agent":
            state, action, is_first = wm.rssm.initial(1), torch.zeros(1, env.action_space.shape[0]), torch.ones(1)
        total, positions, pixels, upright, size, done = 0.0, [], [], [], [], False
        while not done:
            if args.policy == "agent":
                with torch.no_grad():
                    obs_t = torch.as_tensor(obs).permute(2, 0, 1)[None]
                    state, action = script.act(wm, actor, state, action, obs_t, is_first, args.greedy)
                step_action, is_first = action[0].float().numpy(), torch.zeros(1)
            elif args.policy == "zero":
                step_action = np.zeros(env.action_space.shape, np.float32)
            else:
                step_action = rng.uniform(-1, 1, env.action_space.shape).astype(np.float32)
            obs, reward, terminated, truncated, _ = env.step(step_action)
            total, done = total + float(reward), terminated or truncated
            positions.append(float(physics.named.data.qpos["slider"][0]))
            pixels.append(pixels_of(physics, view))
            upright.append((1.0 + float(physics.pole_angle_cosine()[0])) / 2)
            size.append(float(np.abs(step_action).mean()))
        episodes.append((total, np.array(positions), np.array(pixels).reshape(-1, 2), np.array(upright), np.array(size)))
    env.close()
    return episodes, view


def main(args: CartView) -> list:
    episodes, camera = play(args)
    whole = pixels_at(0.0, camera)[0]
    who = args.checkpoint if args.policy == "agent" else f"the {args.policy} policy on {args.task}"
    print(f"{who}: {args.episodes} episodes; the cart whole is {whole} pixels of 64 x 64 (at the rail's middle)")
    print("| seed | return | cart whole | cart cut off | pole out of view | mean abs x | max abs x | upright | abs action |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for seed, (total, positions, pixels, upright, size) in enumerate(episodes, 1):
        cart, pole = pixels[:, 0], pixels[:, 1]
        cut = cart < 0.8 * whole  # off the middle perspective changes the count a little; the frame's edge takes most
        print(
            f"| {seed} | {total:.1f} | {1 - cut.mean():.0%} | {cut.mean():.0%} | {(pole == 0).mean():.0%} | "
            f"{np.abs(positions).mean():.2f} | {np.abs(positions).max():.2f} | {upright.mean():.2f} | {size.mean():.2f} |"
        )
    return episodes


if __name__ == "__main__":
    main(tyro.cli(CartView))
