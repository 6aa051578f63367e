"""Stand-in for the cookbook's model_info: every base here uses the role-colon format."""


def get_recommended_renderer_name(model_name: str) -> str:
    return "role_colon"
