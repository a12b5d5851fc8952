"""Passwords in URLs never shown, whatever the URL (issue 40, defects 7, 8 and 10): a
property test over generated JDBC and Redis URLs (users, passwords of any characters,
hosts, ports, parameters; each driver's URL form, encoded as URLs encode and as people
type them): no repr, str or error message of any object built from them, nor any error
in their cause chains, holds the password; an accepted URL holds exactly it, and with a
real MariaDB user and a real Redis ACL user of that password, connects with it."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import quote, quote_plus, unquote, urlsplit

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cache import RedisLookupCache
from connectors.sql.jdbc.url import parse_jdbc_url
from lookup import LookupOptions, RedisKeyspaceChanges, RedisLookupFunction, open_lookup
from scan import RedisScanSource
from spark_lookup.errors import ConfigError, SparkLookupError

# A password: a marker no message text holds, then any characters (controls aside: no
# URL carries them), then the marker again.
_ANY = st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=12)
PASSWORDS = st.builds(lambda text: f"Zq{text}Qz", _ANY)
USERS = st.text(st.characters(whitelist_categories=("Ll", "Lu", "Nd")), min_size=1,
                max_size=8)
HOSTS = st.sampled_from(["127.0.0.1", "db.example", "h", "[::1]"])
PORTS = st.one_of(st.none(), st.integers(1, 65535))
SUBPROTOCOLS = st.sampled_from(["postgresql", "mysql", "mariadb"])
EXTRAS = st.sampled_from(["", "&connectTimeout=3", "&ssl", "&bogus=1"])
"""Parameters after the credentials: none, a timeout, TLS (each database's spelling),
one no driver takes."""


def forms(password: str) -> set[str]:
    """The password as text may hold it: plain, as URLs encode it, and each run of six
    or more letters and digits in it (a part shown past a ';' or '@' is a leak too)."""
    runs = set(re.findall(r"[A-Za-z0-9]{6,}", password))
    return {password, quote(password, safe=""), quote_plus(password), quote(password), *runs}


def chain(error: BaseException) -> Iterator[BaseException]:
    """An error and its causes and contexts, each once (a finite walk: a loop in the
    chain fails the test that walks it)."""
    seen: list[int] = []
    todo: list[BaseException | None] = [error]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.append(id(current))
        assert len(seen) < 50, f"an error chain of 50 links from {error!r}"
        yield current
        todo += [current.__cause__, current.__context__]


def assert_hidden(password: str, *texts: object) -> None:
    for text in texts:
        shown = text if isinstance(text, str) else repr(text)
        for form in forms(password):
            assert form not in shown, f"{form!r} shown in {shown!r}"
            assert form not in str(text), f"{form!r} shown in {text!s}"


def check_error(password: str, error: BaseException) -> None:
    for link in chain(error):
        assert_hidden(password, str(link), repr(link), *map(str, link.args))


def attempt(build: Any, url: str) -> tuple[list[object], SparkLookupError | None]:
    """What ``build`` makes of ``url``, or the error it raised (ours only: any other
    escapes and fails the test)."""
    try:
        return build(url), None
    except SparkLookupError as exc:
        return [], exc


def jdbc_urls(sub: str, user: str, password: str, host: str, port: int | None,
              extra: str) -> dict[str, str]:
    """Each form of a JDBC URL with these credentials: ``encoded`` forms are what a URL
    of this password is; ``typed`` forms hold it as typed (maybe ambiguous)."""
    authority = f"{host}:{port}" if port is not None else host
    extra = extra.replace("&ssl", "&sslmode=require" if sub == "postgresql"
                          else "&sslMode=DISABLED")
    return {
        "encoded-userinfo": f"jdbc:{sub}://{quote(user)}:{quote(password, safe='')}@"
                            f"{authority}/shop?{extra.lstrip('&')}",
        "encoded-param": f"jdbc:{sub}://{authority}/shop?user={quote(user)}"
                         f"&password={quote(password, safe='')}{extra}",
        "typed-userinfo": f"jdbc:{sub}://{user}:{password}@{authority}/shop",
        "typed-param": f"jdbc:{sub}://{authority}/shop?user={user}&password={password}{extra}",
        "typed-no-slashes": f"jdbc:{sub}:{user}:{password}@{authority}/shop",
        "typed-semicolon": f"jdbc:{sub}://{authority}/shop;user={user};password={password}",
        "typed-bad-port": f"jdbc:{sub}://{user}:{password}/shop",
    }


def build_jdbc(url: str) -> list[object]:
    """Every object built from ``url`` by a user of Flink options (not connecting)."""
    options = LookupOptions.from_dict({
        "connector": "jdbc", "url": url, "table-name": "dim", "lookup.cache": "PARTIAL",
        "lookup.partial-cache.max-rows": "10"})
    provider = options.provider(key_columns=["id"], schema="id BIGINT, name STRING")
    function = provider.function
    return [options, provider, function, getattr(function, "connection_factory", None)]


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(SUBPROTOCOLS, USERS, PASSWORDS, HOSTS, PORTS, EXTRAS)
@example("mysql", "app", "ZqSECRETTAILQz", "h", None, "")
@example("mysql", "app", "Zqab;SECRETTAILQz", "h", None, "")
@example("mysql", "app", "Zqp@SECRETTAILQz", "h", None, "")
@example("mysql", "app", "Zqpa/SECRETTAILQz", "h", 3306, "")
@example("postgresql", "app", "Zqa#b?c&SECRETQz", "h", None, "&ssl")
def test_no_jdbc_url_shows_its_password(sub: str, user: str, password: str, host: str,
                                        port: int | None, extra: str) -> None:
    for form, url in jdbc_urls(sub, user, password, host, port, extra).items():
        built, error = attempt(build_jdbc, url)
        if error is not None:
            check_error(password, error)
            assert isinstance(error, ConfigError), (form, error)
            assert not (form.startswith("encoded") and "bogus" not in extra), (
                f"{form} refused: {error}")
            continue
        parsed = parse_jdbc_url(url)
        assert parsed.password is not None, form
        if form.startswith("encoded"):
            assert parsed.password.reveal() == password, form
        # Typed, the URL may read otherwise than meant (a password holding '@' before a
        # missing host): what is hidden is the password it reads as.
        secret = parsed.password.reveal()
        assert_hidden(secret, *built, *map(str, built), parsed, parsed.shown)


REDIS_FORMS = ("encoded", "typed")


def redis_url(form: str, user: str, password: str, host: str, port: int | None) -> str:
    authority = f"{host}:{port}" if port is not None else host
    secret = quote(password, safe="") if form == "encoded" else password
    return f"redis://{quote(user) if form == 'encoded' else user}:{secret}@{authority}/0"


def build_redis(url: str) -> list[object]:
    schema = "id BIGINT, name STRING"
    return [
        RedisLookupFunction(url, "c:{id}", schema, "id"),
        RedisLookupCache(url, "dim", timedelta(minutes=5)),
        RedisKeyspaceChanges(url, "c:{id}", schema, check=False),
        RedisScanSource(url, schema=schema, key_template="c:{id}", key_columns=["id"]),
        LookupOptions.from_dict({"connector": "redis", "url": url, "key-template": "c:{id}",
                                 "lookup.cache": "NONE"}),
    ]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(USERS, PASSWORDS, HOSTS, PORTS)
@example("app", "Zqpa/SECRETTAILQz", "h", 6379)
@example("app", "Zqp@ss:w#rdQz", "h", None)
def test_no_redis_url_shows_its_password(user: str, password: str, host: str,
                                         port: int | None) -> None:
    for form in REDIS_FORMS:
        url = redis_url(form, user, password, host, port)
        built, error = attempt(build_redis, url)
        if error is not None:
            check_error(password, error)
            assert form == "typed", f"{form} refused: {error}"
            continue
        secret = unquote(urlsplit(url).password or "")
        if form == "encoded":
            assert secret == password
        assert_hidden(secret, *built, *map(str, built))


# --- accepted URLs connect with exactly the password ----------------------------------

CONNECTING = st.builds(lambda text: f"Zq{text}Qz",
                       st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zs")),
                               max_size=10))


@pytest.fixture(scope="module")
def mysql_user(mysql_url: str) -> Iterator[tuple[str, Any]]:
    """A MariaDB user of the test's own, and a function that sets its password; a
    table ``dim`` it may read, in a database of the test's own."""
    import pymysql

    from tests.conftest import mysql_params, own_mysql_db

    name = f"sl_{uuid.uuid4().hex[:10]}"
    with own_mysql_db(mysql_url) as database:
        params = mysql_params(mysql_url, database)
        admin = pymysql.connect(**params, autocommit=True)
        try:
            with admin.cursor() as cursor:
                cursor.execute("CREATE TABLE dim (id BIGINT PRIMARY KEY, name TEXT)")
                cursor.execute("INSERT INTO dim VALUES (1, 'ada')")
                for host in ("%", "localhost", "127.0.0.1"):
                    cursor.execute(f"CREATE USER '{name}'@'{host}'")
                    cursor.execute(f"GRANT SELECT ON `{database}`.* TO '{name}'@'{host}'")

            def set_password(password: str) -> None:
                with admin.cursor() as cursor:
                    for host in ("%", "localhost", "127.0.0.1"):
                        # %% : pymysql formats the statement with its parameters.
                        cursor.execute(f"ALTER USER '{name}'@'{host.replace('%', '%%')}' "
                                       "IDENTIFIED BY %s", (password,))

            yield f"{params['host']}:{params['port']}/{database}|{name}", set_password
        finally:
            with admin.cursor() as cursor:
                for host in ("%", "localhost", "127.0.0.1"):
                    cursor.execute(f"DROP USER IF EXISTS '{name}'@'{host}'")
            admin.close()


@pytest.mark.mysql
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(password=CONNECTING)
@example(password="Zqpa/ss@w:o#r?d&x;y+z%41Qz")
def test_an_accepted_jdbc_url_connects_with_exactly_its_password(
        mysql_user: tuple[str, Any], password: str) -> None:
    where, set_password = mysql_user
    place, user = where.split("|")
    set_password(password)
    for url in (f"jdbc:mysql://{user}:{quote(password, safe='')}@{place}",
                f"jdbc:mariadb://{place}?user={user}&password={quote(password, safe='')}"):
        options = LookupOptions.from_dict({
            "connector": "jdbc", "url": url, "table-name": "dim", "lookup.cache": "NONE",
            "lookup.max-retries": "0"})
        provider = options.provider(key_columns=["id"], schema="id BIGINT, name STRING")
        with open_lookup(provider) as handle:
            assert handle.lookup((1,)) == ((1, "ada"),)
        wrong = url.replace(quote(password, safe=""), quote(password[:-1], safe=""))
        wrong_provider = LookupOptions.from_dict({
            "connector": "jdbc", "url": wrong, "table-name": "dim", "lookup.cache": "NONE",
            "lookup.max-retries": "0"}).provider(key_columns=["id"],
                                                 schema="id BIGINT, name STRING")
        with pytest.raises(SparkLookupError) as raised, open_lookup(wrong_provider) as handle:
            handle.lookup((1,))
        check_error(password, raised.value)


@pytest.fixture
def redis_user(redis_url: str, redis_client: Any) -> Iterator[tuple[str, Any]]:
    name = f"sl_{uuid.uuid4().hex[:10]}"
    base = redis_url.split("://", 1)[1].rsplit("@", 1)[-1]

    def set_password(password: str) -> None:
        redis_client.acl_setuser(name, enabled=True, reset_passwords=True,
                                 passwords=[f"+{password}"], keys=["*"],
                                 commands=["+@all"])

    try:
        yield f"{base}|{name}", set_password
    finally:
        redis_client.acl_deluser(name)


@pytest.mark.redis
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(password=CONNECTING)
@example(password="Zqpa/ss@w:o#r?d&x;y+z%41Qz")
def test_an_accepted_redis_url_connects_with_exactly_its_password(
        redis_user: tuple[str, Any], redis_client: Any, password: str) -> None:
    where, set_password = redis_user
    place, user = where.split("|")
    set_password(password)
    key = f"sltest:{uuid.uuid4().hex[:8]}:c:1"
    redis_client.hset(key, mapping={"name": "ada"})
    try:
        host, db = place.split("/", 1) if "/" in place else (place, "0")
        url = f"redis://{user}:{quote(password, safe='')}@{host}/{db}"
        function = RedisLookupFunction(url, key[:-1] + "{id}", "id BIGINT, name STRING", "id")
        with open_lookup(function_provider(function)) as handle:
            assert handle.lookup((1,)) == ((1, "ada"),)
    finally:
        redis_client.delete(key)


def function_provider(function: Any) -> Any:
    from lookup import LookupFunctionProvider

    return LookupFunctionProvider.of(function, max_retries=0)
