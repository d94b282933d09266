"""Networks: encoder → core → heads (see DESIGN.md, "The policy")."""

from rlfoundry.nets.policy import ActorCritic, build_actor_critic

__all__ = ["ActorCritic", "build_actor_critic"]
