"""Networks: encoder → core → heads; any core (memory or none) serves any algorithm through one interface."""

from rlfoundry.nets.policy import ActorCritic, build_actor_critic

__all__ = ["ActorCritic", "build_actor_critic"]
