"""World models: learned simulators the policy trains inside (SimPLe's next-frame predictor, latent dynamics),
the vector env that steps them, and MBARC's reward-head training strategies (`reward_strategies`).

Import the modules themselves (`from rlfoundry.world_models import reward_strategies`): this file imports nothing,
so loading one piece never pulls in the others.
"""
