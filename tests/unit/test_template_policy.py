"""kiln's allow-list for templates in inventory values, and the time and memory bound of a render."""

from __future__ import annotations

import time

import pytest

from kiln.inventory.template_policy import RenderBound, bounded_render, refusal

ALLOWED = [
    "{{ inventory_hostname[3:] | int }}",
    "{{ 10 + inventory_hostname[3:] | int }}",
    "10.0.{{ inventory_hostname[4:] | int }}.1",
    "{{ openhpc_cluster_name | default('hpc') }}",
    "{{ inventory_hostname in groups['compute'] }}",
    "{{ kiln_versions.slurm }}",
    "{{ 'a' if x is defined else 'b' }}",
    "{% if x %}a{% else %}b{% endif %}",
    "{{ [a, b] | join(',') | upper }}",
    "{{ memory_gb * 1024 }}",
    "{{ pin is version('23.02', '>=') }}",
    "plain text",
]
REFUSED = {
    "{% include '/etc/passwd' %}": "{% include %}",
    "{% extends 'x' %}": "{% extends %}",
    "{% from 'x' import y %}": "{% from ... import %}",
    "{% set a = 1 %}{{ a }}": "{% set %}",
    "{% macro m() %}{% endmacro %}": "{% macro %}",
    "{{ lookup('pipe', 'id') }}": "a function call",
    "{{ x.ljust(10) }}": "a function call",
    "{{ 2 ** 64 }}": "'**'",
    "{{ '%d' % 1 }}": "'%'",
    "{{ 'x' * 3 }}": "'*' with a string",
    "{{ n * 100000 }}": "'*' with a string or a factor over 10000",
    "{{ x | regex_replace('(a+)+$', '') }}": "the filter 'regex_replace'",
    "{{ x | map('lookup') | list }}": "the filter 'map'",
    "{{ x is file }}": "the test 'file'",
    "{{ x is match('a') }}": "the test 'match'",
    "{{ x.__class__ }}": "the attribute '__class__'",
    "{% for i in x %}{% endfor %}": "{% for %}",
}


@pytest.mark.parametrize("template", ALLOWED)
def test_what_settings_use_is_allowed(template):
    assert refusal(template) is None


@pytest.mark.parametrize("template,what", REFUSED.items())
def test_what_reaches_the_machine_or_costs_without_bound_is_refused(template, what):
    reason = refusal(template)
    assert reason and reason.startswith(what), reason


def test_a_render_past_its_time_is_stopped():
    start = time.monotonic()
    with pytest.raises(RenderBound, match="more than 0.3 s"):
        with bounded_render(seconds=0.3):
            while True:
                pass
    assert time.monotonic() - start < 2


def test_a_render_past_its_memory_is_stopped_and_the_limit_restored():
    import resource
    before = resource.getrlimit(resource.RLIMIT_AS)
    with pytest.raises(RenderBound, match="more than 64 MiB"):
        with bounded_render(memory=64 * 2**20):
            bytearray(1024 * 2**20)
    assert resource.getrlimit(resource.RLIMIT_AS) == before
    assert len(bytearray(200 * 2**20)) == 200 * 2**20  # the process may allocate again
