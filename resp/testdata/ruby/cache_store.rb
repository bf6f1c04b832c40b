# Runs ActiveSupport's RedisCacheStore (increment with expires_in, raw
# read and write, fetch, delete_matched) and Rack::Attack's counter on it
# against the server on the port given, printing each outcome, one per line,
# for TestRailsCacheStore to compare between sluice and redis-server.
require "active_support"
require "active_support/cache"
require "active_support/cache/redis_cache_store"
require "rack/attack"

port = ARGV.fetch(0)
store = ActiveSupport::Cache::RedisCacheStore.new(url: "redis://127.0.0.1:#{port}/0", namespace: "app",
                                                  error_handler: ->(method:, returning:, exception:) { raise exception })
redis = Redis.new(url: "redis://127.0.0.1:#{port}/0")
redis.flushall

puts "increment #{(1..4).map { store.increment("hits", 1, expires_in: 60) }.inspect}"
puts "increment by 5 #{store.increment("hits", 5, expires_in: 60)}"
puts "decrement #{store.decrement("hits", 2, expires_in: 60)}"
puts "read raw #{store.read("hits", raw: true).inspect}"
puts "ttl hits #{redis.ttl("app:hits")}"
puts "increment without expiry #{store.increment("forever")} ttl #{redis.ttl("app:forever")}"
puts "write raw #{store.write("n", "41", raw: true, expires_in: 30)} then #{store.increment("n")} ttl #{redis.ttl("app:n")}"
puts "fetch #{store.fetch("f", raw: true, expires_in: 10) { "computed" }.inspect} #{store.fetch("f", raw: true) { "again" }.inspect}"
puts "exist #{redis.exists("app:hits")} #{redis.exists("app:nothing")}"
store.delete_matched("h*")
puts "after delete_matched #{redis.exists("app:hits")} #{redis.exists("app:n")}"

Rack::Attack.cache.store = store
period = 3600
counts = (1..3).map { Rack::Attack.cache.count("login:1.2.3.4", period) }
key = redis.keys("*rack::attack*").first
puts "rack-attack counts #{counts.inspect} type #{redis.type(key)} ttl>0 #{redis.ttl(key) > 0}"
Rack::Attack.cache.reset_count("login:1.2.3.4", period)
puts "rack-attack after reset #{Rack::Attack.cache.count("login:1.2.3.4", period)}"
puts "keys #{redis.dbsize}"
