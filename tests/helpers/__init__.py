"""What several test files share: fake servers and upstreams, model and server locators, small builders.

Each module is imported by name (``from tests.helpers._trees import write``);
none is a test file, so pytest collects nothing here.
"""
