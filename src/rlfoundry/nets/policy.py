"""The actor-critic: encoder → core → heads, with one trunk shared or one trunk per head."""

from __future__ import annotations

import math
from typing import Any, NamedTuple, cast

import torch
from gymnasium import spaces
from torch import nn

from rlfoundry.envs import EnvInfo
from rlfoundry.nets.cores import CORES, Core
from rlfoundry.nets.encoders import ENCODERS, encoder_for
from rlfoundry.nets.heads import LOG_SQRT_2PI, CategoricalHead, GaussianHead, MultiCategoricalHead, ValueHead


class PolicyOutput(NamedTuple):
    actions: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor


State = tuple  # a recurrent policy's memory: one core state per trunk (see `rlfoundry.nets.cores`)


def _discrete(space: spaces.Space) -> spaces.Discrete:
    assert isinstance(space, spaces.Discrete), space
    return space


def _box(space: spaces.Space) -> spaces.Box:
    assert isinstance(space, spaces.Box), space
    return space


def choice_sizes(space: spaces.Space) -> list[int] | None:
    """The number of choices of each entry of a MultiDiscrete or MultiBinary action space (1-D); None for others."""
    if isinstance(space, spaces.MultiDiscrete):
        return [int(n) for n in space.nvec]
    if isinstance(space, spaces.MultiBinary):
        return [2] * int(space.n if isinstance(space.n, int) else space.n[0])
    return None


class ActorCritic(nn.Module):
    """encoder → core → heads. With `shared: false` the actor and the critic each get their own
    trunk (encoder group and core); the encoder evaluates both groups in one batched pass.

    Observations come flat, [T·B, ...] in time-major order; `steps` is T. Feed-forward policies
    (identity cores) ignore `state` and `starts`; recurrent ones take the memory at the first step
    and `starts` [T, B] (true where an episode begins, which resets the memory there) and return the
    memory after the last step.
    """

    def __init__(self, spec: EnvInfo, net_cfg):
        super().__init__()
        groups = 1 if net_cfg.shared else 2
        self.encoder = encoder_for(spec.observation_space, net_cfg, groups)
        cores = [CORES[net_cfg.core](self.encoder.out_features, net_cfg) for _ in range(groups)]
        self.cores = nn.ModuleList(cores)
        self.recurrent = net_cfg.core != "identity"
        width = cores[0].out_features
        sizes = choice_sizes(spec.action_space)
        self.pi: CategoricalHead | MultiCategoricalHead | GaussianHead
        if spec.discrete:
            self.pi = CategoricalHead(width, int(_discrete(spec.action_space).n), net_cfg.ortho_init)
        elif sizes is not None:
            self.pi = MultiCategoricalHead(width, sizes, net_cfg.ortho_init)
        else:
            action_dim = int(_box(spec.action_space).shape[0])
            self.pi = GaussianHead(width, action_dim, net_cfg.ortho_init, net_cfg.log_std_init)
        self.v = ValueHead(width, net_cfg.ortho_init)

    def initial_state(self, batch_size: int) -> State | None:
        # nn.ModuleList types its items Module; these are Cores
        return tuple(cast(Core, core).initial_state(batch_size) for core in self.cores) if self.recurrent else None

    def _features(self, obs: torch.Tensor, state: State | None, starts: torch.Tensor | None,
                  steps: int) -> tuple[torch.Tensor, torch.Tensor, State | None]:
        """(actor features, critic features) [T·B, H] and the new memory."""
        encoded = self.encoder(obs)  # [G, T·B, H]
        if not self.recurrent:
            return encoded[0], encoded[-1], None
        groups, _, width = encoded.shape
        encoded = encoded.view(groups, steps, -1, width)
        if starts is not None:
            starts = starts.view(steps, -1)
        assert state is not None  # a recurrent policy is given its memory
        outputs = [core(x, s, starts) for core, x, s in zip(self.cores, encoded, state)]
        features = [y.flatten(0, 1) for y, _ in outputs]
        memory = tuple(new for _, new in outputs)
        if torch.is_autocast_enabled(obs.device.type):  # bf16: the memory stays float32, as checkpoints hold it
            memory = tuple(tuple(t.float() for t in core) for core in memory)
        return features[0], features[-1], memory

    def act(self, obs: torch.Tensor, state: State | None = None,
            starts: torch.Tensor | None = None) -> tuple[PolicyOutput, State | None]:
        """One step for a batch of envs: sampled actions, their log-probabilities, values, the new memory."""
        actor, critic, state = self._features(obs, state, starts, 1)
        dist = self.pi(actor)
        actions = self.pi.sample(dist, False)
        return PolicyOutput(actions, self.pi.log_prob(dist, actions), self.v(critic)), state

    def predict(self, obs: torch.Tensor, deterministic: bool = True, state: State | None = None,
                starts: torch.Tensor | None = None) -> tuple[torch.Tensor, State | None]:
        """Actions only (evaluation, play), and the new memory."""
        actor, _, state = self._features(obs, state, starts, 1)
        return self.pi.sample(self.pi(actor), deterministic), state

    def action_logprobs(self, obs: torch.Tensor) -> torch.Tensor:
        """A feed-forward policy's normalised log-probabilities [N, A] over a Discrete action space (for sampling
        at a temperature)."""
        return self.pi(self._features(obs, None, None, 1)[0])

    def value(self, obs: torch.Tensor, state: State | None = None, starts: torch.Tensor | None = None) -> torch.Tensor:
        return self.v(self._features(obs, state, starts, 1)[1])

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor, state: State | None = None, steps: int = 1,
                 rows: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log-probabilities of `actions`, entropies, values) with gradients, for the update; a recurrent policy
        replays whole sequences [T·B] from the memory they started with (no episode starts inside them), and
        `rows` (indices into them) picks the rows that `actions` belong to and the results are for."""
        actor, critic, _ = self._features(obs, state, None, steps)
        if rows is not None:
            shared = critic is actor
            actor = actor.index_select(0, rows)
            critic = actor if shared else critic.index_select(0, rows)
        dist = self.pi(actor)
        return self.pi.log_prob(dist, actions), self.pi.entropy(dist), self.v(critic)


def build_actor_critic(spec: EnvInfo, net_cfg) -> ActorCritic:
    return ActorCritic(spec, net_cfg)


class MemoryNet(nn.Module):
    """encoder → core, for the off-policy networks: `features` of observations, through the core's memory when it
    has one (`recurrent`). A subclass builds its heads on `width` and names them as it likes; the identity core
    holds no weights, so a feed-forward network's state dict is the encoder's and the heads'."""

    def __init__(self, observation_space, net_cfg):
        super().__init__()
        self.encoder = encoder_for(observation_space, net_cfg, 1)
        self.core = CORES[net_cfg.core](self.encoder.out_features, net_cfg)
        self.recurrent = net_cfg.core != "identity"
        self.width = self.core.out_features

    def initial_state(self, batch_size: int) -> tuple[torch.Tensor, ...] | None:
        return self.core.initial_state(batch_size)

    def features(self, obs: torch.Tensor, state=None, starts: torch.Tensor | None = None, steps: int = 1,
                 final_state: bool = True):
        """Features [T·N, H] of observations [T·N, ...] in time-major order, the core starting from `state` and
        reset where `starts` [T, N] is true; and the state after the last step (None for a feed-forward network,
        or where `final_state` is false and the core skips it)."""
        features = self.encoder(obs).squeeze(0)  # the encoder's one group [1, N, H]
        if not self.recurrent:
            return features, None
        features, state = self.core(features.view(steps, -1, features.shape[-1]), state, starts, final_state)
        if torch.is_autocast_enabled(obs.device.type) and state is not None:  # the memory stays float32
            state = tuple(t.float() for t in state)
        return features.flatten(0, 1), state


class QNetwork(MemoryNet):
    """encoder → core → Q-values [N, A]; with `dueling`, Q = V + (A − mean A) from two linear streams (Wang et al.
    2016, arXiv:1511.06581). Feed-forward networks (identity core) are called on observations; a memory core's
    networks `unroll` sequences from a stored state (R2D2)."""

    def __init__(self, spec: EnvInfo, net_cfg, dueling: bool):
        super().__init__(spec.observation_space, net_cfg)
        num_actions = int(_discrete(spec.action_space).n)
        self.advantage = nn.Linear(self.width, num_actions)
        self.value = nn.Linear(self.width, 1) if dueling else None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values of a feed-forward network [N, A]."""
        return self.head(self.encoder(obs).squeeze(0))

    def unroll(self, obs: torch.Tensor, state, starts: torch.Tensor | None, steps: int = 1,
               final_state: bool = True):
        """Q-values [T·N, A] and the new state (`features`)."""
        features, state = self.features(obs, state, starts, steps, final_state)
        return self.head(features), state

    def head(self, features: torch.Tensor) -> torch.Tensor:
        q = self.advantage(features).float()
        if self.value is not None:
            q = self.value(features).float() + q - q.mean(-1, keepdim=True)
        return q


LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # SB3's bounds for the state-dependent log std


class SquashedGaussianActor(MemoryNet):
    """encoder → core → (mean, log std) → a = tanh(u), u ~ N(mean, std), scaled to the action bounds (Haarnoja et
    al. 2018, appendix C: the log-probability carries the tanh change of variables)."""

    scale: torch.Tensor  # buffers, registered in __init__
    offset: torch.Tensor

    def __init__(self, spec: EnvInfo, net_cfg):
        super().__init__(spec.observation_space, net_cfg)
        action_space = _box(spec.action_space)
        action_dim = int(action_space.shape[0])
        self.mean = nn.Linear(self.width, action_dim)
        self.log_std = nn.Linear(self.width, action_dim)
        low, high = torch.as_tensor(action_space.low), torch.as_tensor(action_space.high)
        self.register_buffer("scale", (high - low) / 2)
        self.register_buffer("offset", (high + low) / 2)

    def forward(self, obs: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(actions in the env's bounds [N, A], their log-probabilities [N]) of a feed-forward actor."""
        return self.head(self.encoder(obs).squeeze(0), deterministic)

    def head(self, features: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        mean = self.mean(features).float()
        log_std = self.log_std(features).float().clamp(LOG_STD_MIN, LOG_STD_MAX)
        u = mean if deterministic else mean + log_std.exp() * torch.randn_like(mean)
        logp = (-0.5 * ((u - mean) / log_std.exp()).square() - log_std - LOG_SQRT_2PI).sum(-1)
        # log(1 − tanh(u)²) = 2·(log 2 − u − softplus(−2u)), the numerically stable form
        logp = logp - (2 * (math.log(2) - u - nn.functional.softplus(-2 * u))).sum(-1)
        return torch.tanh(u) * self.scale + self.offset, logp - torch.log(self.scale).sum()


def twin_linear(width: int, outputs: int, critics: int = 2) -> tuple[nn.Parameter, nn.Parameter]:
    """The critics' output layers as one batched linear layer (weight [C, width, outputs], bias [C, 1, outputs]),
    each with nn.Linear's default init."""
    bound = 1 / math.sqrt(width)
    weight = nn.Parameter(torch.empty(critics, width, outputs).uniform_(-bound, bound))
    return weight, nn.Parameter(torch.empty(critics, 1, outputs).uniform_(-bound, bound))


class TwinQ(nn.Module):
    """`critics` Q(s, a) networks over [obs, action] (two: the twin critics of TD3 and SAC; one: DDPG's), evaluated
    as one stacked MLP (the encoder's groups): [C, N]."""

    def __init__(self, spec: EnvInfo, net_cfg, critics: int = 2):
        super().__init__()
        in_features = math.prod(spec.obs_shape) + int(_box(spec.action_space).shape[0])
        self.encoder = ENCODERS["mlp"]((in_features,), net_cfg, critics)
        self.weight, self.bias = twin_linear(self.encoder.out_features, 1, critics)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        h = self.encoder(torch.cat([obs.flatten(1).float(), actions.float()], -1))  # [C, N, H]
        return torch.baddbmm(self.bias, h, self.weight).squeeze(-1)  # [C, N]


class CategoricalActor(MemoryNet):
    """encoder → core → log π(·|s) [N, A] over a Discrete action space: the actor of discrete SAC (Christodoulou
    2019, arXiv:1910.07207), whose losses take the expectation over all actions."""

    def __init__(self, spec: EnvInfo, net_cfg):
        super().__init__(spec.observation_space, net_cfg)
        self.pi = CategoricalHead(self.width, int(_discrete(spec.action_space).n), net_cfg.ortho_init)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Normalised log-probabilities of every action [N, A] (fp32) of a feed-forward actor."""
        return self.head(self.encoder(obs).squeeze(0))

    def head(self, features: torch.Tensor) -> torch.Tensor:
        return self.pi(features)


class TwinQDiscrete(nn.Module):
    """Two Q(s, ·) networks giving the values of every action, evaluated as one stacked network (the
    encoder's groups, then one batched linear layer): [2, N, A]. The discrete counterpart of TwinQ."""

    def __init__(self, spec: EnvInfo, net_cfg):
        super().__init__()
        self.encoder = encoder_for(spec.observation_space, net_cfg, 2)
        self.weight, self.bias = twin_linear(self.encoder.out_features, int(_discrete(spec.action_space).n))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, self.encoder(obs).float(), self.weight)  # [2, N, A]


class RecurrentCritic(MemoryNet):
    """The critics of SAC and TD3 over an encoder's features: with a memory core, after Ni et al. 2022 ("Recurrent
    Model-Free RL Can Be a Strong Baseline for Many POMDPs", arXiv:2110.05038), one memory of their own over the
    observations (encoder → core); feed-forward, an image encoder the critics share (as SAC-AE and DrQ do). Then
    `critics` stacked MLP heads: Q(h, a) [C, N] over [features, action] for Box actions, Q(h, ·) [C, N, A] for
    Discrete ones."""

    def __init__(self, spec: EnvInfo, net_cfg, critics: int = 2):
        super().__init__(spec.observation_space, net_cfg)
        self.discrete = spec.discrete
        actions = 0 if spec.discrete else int(_box(spec.action_space).shape[0])
        outputs = int(_discrete(spec.action_space).n) if spec.discrete else 1
        self.heads = ENCODERS["mlp"]((self.width + actions,), net_cfg, critics)
        self.weight, self.bias = twin_linear(self.heads.out_features, outputs, critics)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor | None = None) -> torch.Tensor:
        """A feed-forward network's values at observations: `q` of their features."""
        return self.q(self.features(obs)[0], actions)

    def q(self, features: torch.Tensor, actions: torch.Tensor | None = None) -> torch.Tensor:
        """The critics' values at `features` [N, H]: of `actions` [N, A] (Box), or of every action (Discrete)."""
        inputs = features.float() if actions is None else torch.cat([features.float(), actions.float()], -1)
        q = torch.baddbmm(self.bias, self.heads(inputs).float(), self.weight)  # [C, N, outputs]
        return q if self.discrete else q.squeeze(-1)


class SharedMemory(nn.Module):
    """An actor reading the critics' memory (`algo.shared_memory`): the critics' encoder → core, then `actor`, a
    feed-forward network over those features. Acting, the inspector and export see one network with `features`,
    `head` and `initial_state`; the optimisers see its parts (the memory is the critics', trained by their loss)."""

    recurrent = True

    def __init__(self, memory: MemoryNet, actor: MemoryNet):
        super().__init__()
        self.memory, self.actor = memory, actor
        self.width = actor.width

    def initial_state(self, batch_size: int) -> tuple[torch.Tensor, ...] | None:
        return self.memory.initial_state(batch_size)

    def features(self, obs: torch.Tensor, state=None, starts: torch.Tensor | None = None, steps: int = 1,
                 final_state: bool = True):
        features, state = self.memory.features(obs, state, starts, steps, final_state)
        return self.actor.features(features)[0], state

    def head(self, features: torch.Tensor, *args: Any):
        return self.actor.head(features, *args)  # type: ignore[operator]


# ---------------------------------------------------------------- acting networks for export: deterministic actions
# from an observation (already normalised) and the memory as flat tensors, as `Agent.acting_network` returns them.


class GreedyActorCritic(nn.Module):
    """An ActorCritic's deterministic action: the most likely one, or the Gaussian mean clipped to the action bounds;
    a memory core's state goes in and comes out as flat tensors."""

    low: torch.Tensor  # buffers, registered in __init__ for a Box action space
    high: torch.Tensor

    def __init__(self, net: ActorCritic, spec: EnvInfo):
        super().__init__()
        self.net, self.discrete = net, spec.choices
        initial = net.initial_state(1)  # None: feed-forward
        self.layout = [len(state) for state in initial] if initial is not None else []  # tensors per core
        if not self.discrete:
            action_space = _box(spec.action_space)
            self.register_buffer("low", torch.as_tensor(action_space.low, dtype=torch.float32))
            self.register_buffer("high", torch.as_tensor(action_space.high, dtype=torch.float32))

    def initial_state(self, batch_size: int) -> list[torch.Tensor]:
        states = self.net.initial_state(batch_size)
        if states is None:  # feed-forward
            return []
        return [tensor for state in states for tensor in state]

    def forward(self, obs: torch.Tensor, *state: torch.Tensor):
        memory, start = [], 0
        for count in self.layout:
            memory.append(tuple(state[start:start + count]))
            start += count
        features, _, new = self.net._features(obs, tuple(memory) if self.layout else None, None, 1)
        actions = self.net.pi.sample(self.net.pi(features), True)
        if not self.discrete:
            actions = torch.maximum(torch.minimum(actions, self.high), self.low)
        if self.layout:
            assert new is not None  # a recurrent net's new memory
            return (actions, *[tensor for core in new for tensor in core])
        return actions


class MemoryActing(nn.Module):
    """A MemoryNet's deterministic action (`act` of its features); a memory core's state goes in and comes out as
    flat tensors, as GreedyActorCritic's."""

    def __init__(self, net: MemoryNet | SharedMemory):
        super().__init__()
        self.net = net

    def initial_state(self, batch_size: int) -> list[torch.Tensor]:
        return list(self.net.initial_state(batch_size) or ()) if self.net.recurrent else []

    def forward(self, obs: torch.Tensor, *state: torch.Tensor):
        features, new = self.net.features(obs, tuple(state) if self.net.recurrent else None, None)
        actions = self.act(features)
        return (actions, *new) if new is not None else actions

    def act(self, features: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class Greedy(MemoryActing):
    """argmax over a network's per-action outputs (Q-values, log-probabilities)."""

    def act(self, features: torch.Tensor) -> torch.Tensor:
        return cast(QNetwork | CategoricalActor, self.net).head(features).argmax(-1)


class SquashedMean(MemoryActing):
    """A SquashedGaussianActor's deterministic action: tanh of its mean, scaled to the bounds."""

    def act(self, features: torch.Tensor) -> torch.Tensor:
        return cast(SquashedGaussianActor, self.net).head(features, True)[0]


def state_norm(state) -> float:
    """The L2 norm of a memory core's state over all its tensors, leaving out those of one entry per env (counters
    such as the filled length of a transformer's memory)."""
    tensors = []

    def walk(node) -> None:
        if isinstance(node, torch.Tensor):
            if node.is_floating_point() and node.numel() > 1:
                tensors.append(node.float().square().sum())
        elif isinstance(node, (tuple, list)):
            for child in node:
                walk(child)

    walk(state)
    return float(torch.stack(tensors).sum().sqrt()) if tensors else float("nan")


def build_critics(spec: EnvInfo, net_cfg, critics: int = 2) -> TwinQ | TwinQDiscrete | RecurrentCritic:
    """The critics of SAC, TD3 and DDPG: over a memory core's features, or over an image encoder's for Box actions
    (`RecurrentCritic`, one encoder the critics share: an MLP over [pixels, action] would take every pixel as an
    input); else stacked MLPs over [observation, action] (`TwinQ`) or, for Discrete actions, an encoder per critic
    (`TwinQDiscrete`, two critics)."""
    if net_cfg.core != "identity" or (not spec.discrete and net_cfg.encoder != "mlp"):
        return RecurrentCritic(spec, net_cfg, critics)
    return TwinQDiscrete(spec, net_cfg) if spec.discrete else TwinQ(spec, net_cfg, critics)
